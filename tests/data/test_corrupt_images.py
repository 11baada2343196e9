"""Unreadable images: a corrupt and a truncated PNG in a copy of the real CIFAR-10 subset.

Without ``skip_corrupt`` the error names the exact file (in the main process, in loader
workers and in the decoded-once cache); with it, ``setup`` leaves both files out with one
counted warning, and loading and a short Lightning fit work.
"""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import lightning as L
import pytest
import torch

from ncl_lightning.data import ImageFolderDataModule, ImageNetOODDataModule
from ncl_lightning.foundation.errors import CorruptImageError

CLASSES = ("airplane", "automobile")
N_TRAIN, N_VAL = 40, 10
HINT = "set data.init_args.skip_corrupt: true to skip unreadable images"


def _copy_subset(src: Path, dst: Path) -> Path:
    """2 classes x 40 training and 10 validation images of the real subset."""
    for split, n in (("train", N_TRAIN), ("val", N_VAL)):
        for name in CLASSES:
            (dst / split / name).mkdir(parents=True)
            for image in sorted((src / split / name).glob("*.png"))[:n]:
                shutil.copy2(image, dst / split / name / image.name)
    return dst


def _damage(root: Path, kinds: tuple[str, ...]) -> dict[str, str]:
    """Overwrite a PNG with garbage (``corrupt``) and cut one to half (``truncated``)."""
    damaged = {}
    for kind, name in zip(("corrupt", "truncated"), CLASSES, strict=True):
        if kind not in kinds:
            continue
        path = sorted((root / "train" / name).glob("*.png"))[7]
        data = path.read_bytes()
        if kind == "corrupt":
            path.write_bytes(bytes(range(256)) * 4)
        else:
            path.write_bytes(data[: len(data) // 2])
        damaged[kind] = str(path)
    return damaged


@pytest.fixture
def subset_copy(cifar_subset: Path, tmp_path: Path) -> Path:
    return _copy_subset(cifar_subset, tmp_path / "cifar")


def _dm(root: Path, **kwargs) -> ImageFolderDataModule:
    kwargs = {"batch_size": 16, "num_workers": 0, **kwargs}
    return ImageFolderDataModule(root=str(root), **kwargs)


def _index(dm: ImageFolderDataModule, path: str) -> int:
    return [p for p, _ in dm.samples("train")].index(path)


@pytest.mark.parametrize("kind", ["corrupt", "truncated"])
def test_reading_an_unreadable_image_names_it(subset_copy: Path, kind: str) -> None:
    path = _damage(subset_copy, (kind,))[kind]
    dm = _dm(subset_copy)
    dm.setup("fit")  # cache none: nothing decoded yet
    base = dm.base_dataset("train")
    with pytest.raises(CorruptImageError) as info:
        base[_index(dm, path)]
    reason = "cannot identify image file" if kind == "corrupt" else "image file is truncated"
    assert str(info.value) == f"cannot read image {path}: {reason}; {HINT}"
    assert isinstance(info.value, OSError)
    base[0]  # the other images still load


@pytest.mark.parametrize("kind", ["corrupt", "truncated"])
def test_loader_workers_report_the_path(subset_copy: Path, kind: str) -> None:
    path = _damage(subset_copy, (kind,))[kind]
    dm = _dm(subset_copy, num_workers=1, persistent_workers=False)
    dm.setup("fit")
    with pytest.raises(CorruptImageError, match=f"cannot read image {path}"):
        for _ in dm.clean_train_dataloader():
            pass


@pytest.mark.parametrize("kind", ["corrupt", "truncated"])
def test_memory_cache_names_the_path(subset_copy: Path, kind: str) -> None:
    path = _damage(subset_copy, (kind,))[kind]
    dm = _dm(subset_copy, cache="memory")
    with pytest.raises(CorruptImageError) as info:
        dm.setup("fit")  # the decode pass of the cache
    assert path in str(info.value) and HINT in str(info.value)


@pytest.mark.parametrize("cache", ["none", "memory"])
def test_skip_corrupt_leaves_both_out_with_one_warning(subset_copy: Path, cache: str) -> None:
    damaged = _damage(subset_copy, ("corrupt", "truncated"))
    dm = _dm(subset_copy, cache=cache, skip_corrupt=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dm.setup("fit")
    skipped = [str(w.message) for w in caught if "unreadable" in str(w.message)]
    total = N_TRAIN * len(CLASSES)
    assert len(skipped) == 1, skipped  # one warning for train, none for the clean val split
    message = skipped[0]
    assert message.startswith(
        f"skipped 2 unreadable image(s) of {total} in {subset_copy / 'train'}: "
    )
    assert f"{damaged['corrupt']} (cannot identify image file)" in message
    assert f"{damaged['truncated']} (image file is truncated" in message
    assert "\n" not in message
    assert sorted(p for p, _ in dm.skipped_images["train"]) == sorted(damaged.values())
    assert dm.skipped_images["val"] == []
    assert len(dm.train_dataset) == total - 2 and dm.split_size("train") == total - 2
    assert len(dm.val_dataset) == N_VAL * len(CLASSES)
    views, labels = next(iter(dm.train_dataloader()))
    assert views[0].shape == (16, 3, 32, 32) and labels.shape == (16,)
    assert sum(len(y) for _, y in dm.clean_train_dataloader()) == total - 2


def test_an_image_damaged_after_skip_corrupt_checked_it_is_not_told_to_set_it(
    subset_copy: Path,
) -> None:
    """skip_corrupt read every file at setup; one damaged during the run is named, with
    what happened instead of the advice to set the option that is set."""
    dm = _dm(subset_copy, skip_corrupt=True)
    dm.setup("fit")  # cache none: every file read once, none unreadable
    path = _damage(subset_copy, ("corrupt",))["corrupt"]
    with pytest.raises(CorruptImageError) as info:
        dm.base_dataset("train")[_index(dm, path)]
    assert str(info.value).startswith(f"cannot read image {path}: cannot identify image file; ")
    assert HINT not in str(info.value) and "changed during the run" in str(info.value)


def test_disk_cache_records_the_skipped_files(subset_copy: Path, tmp_path: Path) -> None:
    damaged = _damage(subset_copy, ("corrupt", "truncated"))
    cache_dir = tmp_path / "cache"
    first = _dm(subset_copy, cache="disk", cache_dir=str(cache_dir), skip_corrupt=True)
    with pytest.warns(UserWarning, match="skipped 2 unreadable image"):
        first.setup("fit")
    assert len(list(cache_dir.glob("*.skipped.json"))) == 1
    assert not list(cache_dir.glob("*.partial"))
    again = _dm(subset_copy, cache="disk", cache_dir=str(cache_dir), skip_corrupt=True)
    with pytest.warns(UserWarning, match="skipped 2 unreadable image"):
        again.setup("fit")  # from the cache file, no decode
    assert len(again.train_dataset) == len(first.train_dataset) == N_TRAIN * 2 - 2
    x, _ = again.base_dataset("train")[0]
    assert torch.equal(x, first.base_dataset("train")[0][0])
    strict = _dm(subset_copy, cache="disk", cache_dir=str(cache_dir))
    with pytest.raises(CorruptImageError, match="cannot read image") as info:
        strict.setup("fit")  # the recorded files still fail without skip_corrupt
    assert any(path in str(info.value) for path in damaged.values())


def test_disk_cache_without_skip_leaves_no_partial_file(subset_copy: Path, tmp_path: Path) -> None:
    path = _damage(subset_copy, ("truncated",))["truncated"]
    cache_dir = tmp_path / "cache"
    dm = _dm(subset_copy, cache="disk", cache_dir=str(cache_dir))
    with pytest.raises(CorruptImageError, match=f"cannot read image {path}"):
        dm.setup("fit")
    assert list(cache_dir.iterdir()) == []


def test_ood_sets_skip_unreadable_images(subset_copy: Path, tmp_path: Path) -> None:
    damaged = _damage(subset_copy, ("corrupt",))["corrupt"]
    (tmp_path / "classes.txt").write_text("\n".join(CLASSES))
    kwargs = {
        "sketch_root": str(subset_copy / "train"),
        "class_list": str(tmp_path / "classes.txt"),
        "batch_size": 8,
        "num_workers": 0,
    }
    strict = ImageNetOODDataModule(**kwargs)
    strict.setup("test")
    with pytest.raises(CorruptImageError, match=f"cannot read image {damaged}"):
        for _ in strict.test_dataloader()[0]:
            pass
    dm = ImageNetOODDataModule(skip_corrupt=True, **kwargs)
    with pytest.warns(UserWarning, match=r"skipped 1 unreadable image\(s\) of 80"):
        dm.setup("test")
    assert dm.skipped_images == {"sketch": [(damaged, "cannot identify image file")]}
    assert len(dm.test_datasets[0]) == N_TRAIN * 2 - 1


@pytest.mark.slow
def test_fit_on_a_corrupted_copy_with_skip_corrupt(subset_copy: Path, tmp_path: Path) -> None:
    from ncl_lightning.methods import NCL
    from ncl_lightning.nn import SmallCNN

    _damage(subset_copy, ("corrupt", "truncated"))
    dm = _dm(subset_copy, skip_corrupt=True)
    model = NCL(
        backbone=SmallCNN(in_channels=3, width=8, out_dim=16),
        proj_hidden_dim=32,
        proj_output_dim=16,
        num_classes=len(CLASSES),
        batch_size=16,
        warmup_epochs=0,
    )
    trainer = L.Trainer(
        accelerator="cpu",
        max_epochs=1,
        limit_train_batches=2,
        limit_val_batches=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path / "run",
    )
    with pytest.warns(UserWarning, match="skipped 2 unreadable image"):
        trainer.fit(model, datamodule=dm)
    assert trainer.global_step == 2
    assert len(dm.skipped_images["train"]) == 2
