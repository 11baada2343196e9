"""``hold_on_device: true``: the uint8 CIFAR training set held on the training device.

The reference is the ordinary ``augment_on: device`` loader of the same DataModule with
the same seed: the held path must give exactly its images, labels and views, batch by
batch, through a real ``Trainer.fit`` on the CPU device, and a mid-epoch resume must go on
with the batch the uninterrupted ordinary run trained on next. The images are the real
CIFAR-10 subset (``CIFAR_SUBSET``), written as python-version CIFAR-10 batch files that
torchvision's own reader loads (its md5 table patched for them, as in ``tests.fakes``).
"""

from __future__ import annotations

import pickle
from pathlib import Path
from types import SimpleNamespace

import lightning as L
import numpy as np
import pytest
import torch
from PIL import Image
from torchvision.datasets import CIFAR10

from ncl_lightning.data import CIFAR10DataModule, DigitsDataModule, TensorImageDataset
from ncl_lightning.data.held import HELD_RULE, HeldIndices, held_split
from ncl_lightning.foundation.errors import ConfigError, DataError
from tests.conftest import CIFAR_SUBSET
from tests.fakes import md5

CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship",
           "truck")  # fmt: skip
STOP = (1, 1)  # (epoch, batch): the interrupted run's checkpoint holds batches 0, 1 of epoch 1


def _read_split(folder: Path) -> tuple[np.ndarray, list[int]]:
    """The PNGs of an ImageFolder split as CIFAR's ``data`` rows ``[N, 3072]`` and labels."""
    rows, labels = [], []
    for label, name in enumerate(CLASSES):
        for path in sorted((folder / name).glob("*.png")):
            pixels = np.asarray(Image.open(path).convert("RGB"))  # [32, 32, 3]
            rows.append(pixels.transpose(2, 0, 1).reshape(-1))  # CIFAR's channel-major row
            labels.append(label)
    return np.stack(rows), labels


@pytest.fixture(scope="module")
def cifar_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``cifar-10-batches-py`` with the subset's train images as ``data_batch_1`` and its
    val images as ``test_batch``; returns the root (skips without the subset)."""
    if not (CIFAR_SUBSET / "train").is_dir():
        pytest.skip(f"real CIFAR-10 subset not found at {CIFAR_SUBSET} (present in CI)")
    root = tmp_path_factory.mktemp("cifar")
    folder = root / CIFAR10.base_folder
    folder.mkdir()
    for name, split in (("data_batch_1", "train"), ("test_batch", "val")):
        data, labels = _read_split(CIFAR_SUBSET / split)
        entry = {"batch_label": name, "data": data, "labels": labels}
        (folder / name).write_bytes(pickle.dumps(entry, protocol=2))
    meta = {"label_names": list(CLASSES)}
    (folder / CIFAR10.meta["filename"]).write_bytes(pickle.dumps(meta, protocol=2))
    return root


@pytest.fixture
def cifar_root(cifar_files: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The real-image CIFAR-10 files, with torchvision's md5 table patched for them."""
    folder = cifar_files / CIFAR10.base_folder
    monkeypatch.setattr(CIFAR10, "train_list", [["data_batch_1", md5(folder / "data_batch_1")]])
    monkeypatch.setattr(CIFAR10, "test_list", [["test_batch", md5(folder / "test_batch")]])
    meta_md5 = md5(folder / CIFAR10.meta["filename"])
    monkeypatch.setattr(CIFAR10, "meta", {**CIFAR10.meta, "md5": meta_md5})
    return str(cifar_files)


def _cifar(root: str, hold: bool, **kwargs) -> CIFAR10DataModule:
    return CIFAR10DataModule(
        root=root, augment_on="device", hold_on_device=hold, batch_size=64, **kwargs
    )


def _fake_trainer(rank: int = 0, world_size: int = 1, batches: int = 0) -> SimpleNamespace:
    """What the sampler and the transfer hook read of a training Trainer."""
    total = SimpleNamespace(ready=batches)
    progress = SimpleNamespace(current=SimpleNamespace(processed=0))
    loop = SimpleNamespace(epoch_loop=SimpleNamespace(batch_progress=SimpleNamespace(total=total)),
                           epoch_progress=progress)  # fmt: skip
    return SimpleNamespace(training=True, global_rank=rank, world_size=world_size, fit_loop=loop)


# ------------------------------------------------------------ 1. the DataModule API
@pytest.mark.parametrize(("rank", "world_size"), [(0, 1), (1, 2)])
def test_held_batches_are_the_loaders_images(cifar_root: str, rank: int, world_size: int) -> None:
    """Each rank's held batches, gathered by index, are the ordinary loader's uint8 images
    and labels (same sampler, same DDP shard, same dropped last batch); the loader runs in
    the main process and yields only int64 indices and labels."""
    plain, held = _cifar(cifar_root, False), _cifar(cifar_root, True)
    for dm in (plain, held):
        dm.seed = 7
        dm.trainer = _fake_trainer(rank, world_size)
        dm.setup("fit")
    assert isinstance(held.train_dataset, HeldIndices)
    assert held.num_workers == 0 and plain.num_workers > 0
    assert HELD_RULE in held.loader_summary() and HELD_RULE not in plain.loader_summary()
    want, got = list(plain.train_dataloader()), list(held.train_dataloader())
    assert len(got) == len(want) == 3728 // world_size // 64  # last incomplete batch dropped
    for (images, labels), batch in zip(want, got, strict=True):
        indices, held_labels = batch
        assert indices.dtype == torch.int64 and indices.shape == (64,)
        assert torch.equal(held_labels, labels)
        gathered, out_labels = held.transferred_images(batch)
        assert gathered.dtype == torch.uint8 and torch.equal(gathered, images)
        assert out_labels is held_labels
    # The slow, obvious reference: row i of the held tensor is item i of the dataset.
    base, (indices, _) = held.base_dataset("train"), got[0]
    reference = torch.stack([base[int(i)][0] for i in indices])
    assert torch.equal(held.transferred_images(got[0])[0], reference)


def test_held_views_equal_the_loaders_views(cifar_root: str) -> None:
    """Through the transfer hook the held batch becomes the ordinary batch's views."""
    plain, held = _cifar(cifar_root, False), _cifar(cifar_root, True)
    for dm in (plain, held):
        dm.seed = 3
        dm.setup("fit")
        dm.trainer = _fake_trainer(batches=5)
    views, labels = plain.on_after_batch_transfer(next(iter(plain.train_dataloader())), 0)
    got, got_labels = held.on_after_batch_transfer(next(iter(held.train_dataloader())), 0)
    assert torch.equal(got_labels, labels) and len(got) == len(views) == 2
    assert all(torch.equal(a, b) for a, b in zip(got, views, strict=True))
    assert got[0].dtype == torch.float32 and got[0].shape == (64, 3, 32, 32)


def test_hold_needs_augment_on_device(cifar_root: str) -> None:
    """``hold_on_device`` with ``augment_on: cpu`` is one line naming both keys, raised at
    construction (before any data is read)."""
    for build in (
        lambda: CIFAR10DataModule(root=cifar_root, hold_on_device=True),
        lambda: DigitsDataModule(hold_on_device=True, augment_on="cpu"),
    ):
        with pytest.raises(ConfigError) as info:
            build()
        message = str(info.value)
        assert "\n" not in message and info.value.key == "hold_on_device"
        assert "data.init_args.hold_on_device" in message
        assert "data.init_args.augment_on: device" in message and "'cpu'" in message


def test_held_split_refuses_what_is_not_one_uint8_tensor() -> None:
    """Only a uint8 tensor of the crop source's side can be held; a skipped row is left out."""
    images = torch.arange(4 * 3 * 8 * 8).reshape(4, 3, 8, 8).to(torch.uint8)
    got, labels = held_split(TensorImageDataset(images, [0, 1, 2, 3]), 8, "X")
    assert got is images and labels.tolist() == [0, 1, 2, 3]
    with pytest.raises(DataError, match=r"training split of X is not one uint8 tensor"):
        held_split(TensorImageDataset(images, [0, 1, 2, 3]), 16, "X")
    with pytest.raises(DataError, match=r"hold_on_device: false"):
        held_split(TensorImageDataset(images.float() / 255, [0, 1, 2, 3]), 8, "X")


def test_digits_hold_on_device_too() -> None:
    """The digits (the demo's in-memory data) take the option as well."""
    plain = DigitsDataModule(augment_on="device", batch_size=64)
    held = DigitsDataModule(augment_on="device", batch_size=64, hold_on_device=True)
    for dm in (plain, held):
        dm.setup("fit")
        dm.trainer = _fake_trainer()
    want = plain.on_after_batch_transfer(next(iter(plain.train_dataloader())), 0)
    got = held.on_after_batch_transfer(next(iter(held.train_dataloader())), 0)
    assert torch.equal(got[1], want[1])
    assert all(torch.equal(a, b) for a, b in zip(got[0], want[0], strict=True))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_held_images_are_gathered_on_the_gpu(cifar_root: str) -> None:
    """On a GPU the split is moved there once and each batch is gathered there."""
    held = _cifar(cifar_root, True)
    held.setup("fit")
    held.trainer = _fake_trainer()
    indices, labels = next(iter(held.train_dataloader()))
    batch = (indices.cuda(), labels.cuda())
    images, _ = held.transferred_images(batch)
    assert images.device == indices.cuda().device and images.dtype == torch.uint8
    stored = held._held
    held.transferred_images(batch)
    assert held._held is stored  # moved once
    base = held.base_dataset("train")
    assert torch.equal(images.cpu(), torch.stack([base[int(i)][0] for i in indices]))
    views, _ = held.on_after_batch_transfer(batch, 0)
    assert views[0].is_cuda
    held.teardown("fit")
    assert held._held is None


# --------------------------------------------------------- 2. a real Lightning fit
class _Interrupted(Exception):
    """Stands for the kill that ends the interrupted run."""


class _Record(L.Callback):
    """``(epoch, batch index, views, labels)`` of every training batch the method saw;
    with ``save``, a checkpoint after batch ``STOP`` and an interruption there."""

    def __init__(self, save: Path | None = None) -> None:
        self.save = save
        self.batches: list[tuple[int, int, list[torch.Tensor], torch.Tensor]] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        views, labels = batch
        kept = [v.detach().clone() for v in views]
        self.batches.append((trainer.current_epoch, batch_idx, kept, labels.clone()))
        if self.save is not None and (trainer.current_epoch, batch_idx) == STOP:
            trainer.save_checkpoint(self.save)
            raise _Interrupted


class _Linear(L.LightningModule):
    """A linear map of the views (the data, not the model, is under test)."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(3 * 32 * 32, 4)

    def training_step(self, batch, batch_idx) -> torch.Tensor:
        views, _ = batch
        return sum(self.net(v.flatten(1)).square().mean() for v in views)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def _fit(
    root: str, hold: bool, out: Path, save: Path | None = None, ckpt: Path | None = None
) -> _Record:
    L.seed_everything(5, verbose=False)
    record = _Record(save)
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=2,
        limit_train_batches=4,
        limit_val_batches=0,
        default_root_dir=out,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[record],
    )
    try:
        trainer.fit(_Linear(), _cifar(root, hold, num_workers=0), ckpt_path=ckpt)
    except _Interrupted:
        assert save is not None
    return record


def _assert_same(got: list, want: list) -> None:
    assert [(e, i) for e, i, _, _ in got] == [(e, i) for e, i, _, _ in want]
    for (e, i, views, labels), (_, _, ref_views, ref_labels) in zip(got, want, strict=True):
        assert torch.equal(labels, ref_labels), (e, i)
        assert all(torch.equal(a, b) for a, b in zip(views, ref_views, strict=True)), (e, i)


def test_fit_and_resume_match_the_ordinary_loader(cifar_root: str, tmp_path: Path) -> None:
    """Through ``Trainer.fit`` on the CPU the method sees the ordinary loader's views and
    labels, epoch after epoch; a run interrupted mid-epoch and resumed from its checkpoint
    goes on with the next batch of that reference."""
    want = _fit(cifar_root, False, tmp_path / "reference").batches
    assert len(want) == 8  # 2 epochs of 4 batches
    assert not torch.equal(want[0][2][0], want[4][2][0])  # the epochs differ
    _assert_same(_fit(cifar_root, True, tmp_path / "held").batches, want)

    mid = tmp_path / "mid.ckpt"
    stopped = _fit(cifar_root, True, tmp_path / "run", save=mid).batches
    state = torch.load(mid, weights_only=False)["CIFAR10DataModule"]  # a plain module's
    assert (state["epoch"], state["batches"]) == (1, 2)
    resumed = _fit(cifar_root, True, tmp_path / "run", ckpt=mid).batches
    assert [(e, i) for e, i, _, _ in resumed] == [(1, 2), (1, 3)]
    _assert_same(stopped + resumed, want)
