"""The uint8 data path of ``augment_on: device``: in-memory datasets, the decoded-once
image cache, the DataModules' batch transfer hook, and a real Lightning fit through it."""

from __future__ import annotations

import os
import time
from pathlib import Path
from types import SimpleNamespace

import lightning as L
import numpy as np
import pytest
import torch
from PIL import Image
from torch import Tensor
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as TF

from ncl_lightning.data import (
    BatchAugmentation,
    DigitsDataModule,
    ImageFolderDataModule,
    ImageListDataset,
    TensorImageDataset,
    decode_images,
)
from ncl_lightning.data.folder import scan_class_folders
from ncl_lightning.data.loader_defaults import default_workers
from ncl_lightning.data.memory import FixedSizeUInt8, check_cache, to_pil
from ncl_lightning.data.views import DeviceViews
from ncl_lightning.methods import NCL
from ncl_lightning.nn import SmallCNN


def _fake_trainer(batches: int = 0) -> SimpleNamespace:
    """What the DataModule's transfer hook reads of a training Trainer."""
    total = SimpleNamespace(ready=batches)
    progress = SimpleNamespace(current=SimpleNamespace(processed=0))
    loop = SimpleNamespace(epoch_loop=SimpleNamespace(batch_progress=SimpleNamespace(total=total)),
                           epoch_progress=progress)  # fmt: skip
    return SimpleNamespace(training=True, global_rank=0, world_size=1, fit_loop=loop)


def _random_pil(width: int, height: int, seed: int, mode: str = "RGB") -> Image.Image:
    rng = np.random.default_rng(seed)
    shape = (height, width, 3) if mode == "RGB" else (height, width)
    return Image.fromarray(rng.integers(0, 256, shape, dtype=np.uint8), mode=mode)


def _unnormalise(x: Tensor, mean: tuple[float, ...], std: tuple[float, ...]) -> Tensor:
    return x * torch.tensor(std).view(1, -1, 1, 1) + torch.tensor(mean).view(1, -1, 1, 1)


# ------------------------------------------------------- 1. in-memory uint8 images
def test_tensor_image_dataset_items_and_errors() -> None:
    """Items are ``(image [C, H, W], int label)``; a non-4-D tensor or a label count that
    differs from the image count is refused."""
    images = torch.zeros(5, 3, 4, 4, dtype=torch.uint8)
    dataset = TensorImageDataset(images, [0, 1, 2, 3, 4])
    assert len(dataset) == 5 and dataset.labels.dtype == torch.long
    image, label = dataset[3]
    assert image.shape == (3, 4, 4) and image.dtype == torch.uint8
    assert label == 3 and isinstance(label, int)
    with pytest.raises(ValueError, match=r"images must have shape \[N, C, H, W\], got \(5, 4, 4\)"):
        TensorImageDataset(torch.zeros(5, 4, 4), [0] * 5)
    with pytest.raises(ValueError, match="5 images but 4 labels"):
        TensorImageDataset(images, [0, 1, 2, 3])


@pytest.mark.parametrize(("channels", "mode"), [(1, "L"), (3, "RGB")])
def test_to_pil_round_trips_uint8(channels: int, mode: str) -> None:
    """A uint8 ``[C, H, W]`` tensor becomes a PIL image of the right mode, size and pixels;
    anything else passes through unchanged."""
    g = torch.Generator().manual_seed(0)
    image = torch.randint(0, 256, (channels, 6, 9), generator=g).to(torch.uint8)
    pil = to_pil(image)
    assert isinstance(pil, Image.Image) and pil.mode == mode and pil.size == (9, 6)
    back = torch.from_numpy(np.array(pil)).reshape(6, 9, channels).permute(2, 0, 1)
    assert torch.equal(back, image)
    floats = image.float() / 255
    assert to_pil(floats) is floats


def test_fixed_size_uint8() -> None:
    """PIL images of another size are resized (shorter side) and centre-cropped to uint8
    ``[C, S, S]`` as torchvision's Resize + CenterCrop do; float tensors are rounded;
    uint8 tensors of the right size are left alone."""
    to_uint8 = FixedSizeUInt8(16)
    reference = v2.Compose([v2.Resize(16, antialias=True), v2.CenterCrop(16)])
    for pil in (_random_pil(40, 30, 0), _random_pil(30, 40, 1), _random_pil(40, 30, 2, "L")):
        out = to_uint8(pil)
        assert out.dtype == torch.uint8
        assert out.shape == (3 if pil.mode == "RGB" else 1, 16, 16)
        assert torch.equal(out, reference(TF.pil_to_tensor(pil)))
    rgba = _random_pil(16, 16, 3).convert("RGBA")
    assert torch.equal(to_uint8(rgba), TF.pil_to_tensor(rgba.convert("RGB")))
    image = torch.randint(0, 256, (3, 16, 16), generator=torch.Generator().manual_seed(0))
    image = image.to(torch.uint8)
    assert to_uint8(image) is image
    assert torch.equal(to_uint8(image.float() / 255), image)


# ---------------------------------------------------------- 2. decoded-once cache
SIZES = {"a": [(40, 30), (32, 32)], "b": [(20, 50), (33, 31), (16, 16)]}


def _image_folder(root: Path) -> tuple[ImageListDataset, list[tuple[str, int]]]:
    """A small ``root/train/<class>/<n>.png`` folder of images of different sizes."""
    seed = 0
    for name, sizes in SIZES.items():
        (root / "train" / name).mkdir(parents=True)
        for i, (width, height) in enumerate(sizes):
            _random_pil(width, height, seed).save(root / "train" / name / f"{i}.png")
            seed += 1
    samples = scan_class_folders(root / "train", list(SIZES))
    return ImageListDataset(samples, list(SIZES)), samples


def _expected(dataset: ImageListDataset, size: int) -> Tensor:
    to_uint8 = FixedSizeUInt8(size)
    return torch.stack([to_uint8(dataset[i][0]) for i in range(len(dataset))])


def test_decode_images_in_memory(tmp_path: Path) -> None:
    """Memory mode holds every image as ``FixedSizeUInt8`` makes it, with its label."""
    dataset, samples = _image_folder(tmp_path)
    decoded = decode_images(dataset, samples, 24, "memory")
    assert isinstance(decoded, TensorImageDataset)
    assert decoded.images.shape == (5, 3, 24, 24) and decoded.images.dtype == torch.uint8
    assert torch.equal(decoded.images, _expected(dataset, 24))
    assert decoded.labels.tolist() == [0, 0, 1, 1, 1]


def test_decode_images_disk_cache_is_written_once_and_keyed(tmp_path: Path) -> None:
    """Disk mode writes one ``.npy`` (no ``.partial`` left), a second call reuses it
    untouched, and an edited source image changes the key so a new file is written."""
    dataset, samples = _image_folder(tmp_path / "folder")
    cache_dir = tmp_path / "cache"
    first = decode_images(dataset, samples, 24, "disk", cache_dir)
    files = sorted(cache_dir.iterdir())
    assert [f.suffix for f in files] == [".npy"], files
    assert torch.equal(first.images, _expected(dataset, 24))
    assert first.labels.tolist() == [0, 0, 1, 1, 1]
    mtime = files[0].stat().st_mtime_ns

    second = decode_images(dataset, samples, 24, "disk", cache_dir)
    assert sorted(cache_dir.iterdir()) == files and files[0].stat().st_mtime_ns == mtime
    assert torch.equal(second.images, first.images)

    # Another size is another cache.
    decode_images(dataset, samples, 16, "disk", cache_dir)
    assert len(list(cache_dir.glob("*.npy"))) == 2

    edited = Path(samples[0][0])
    _random_pil(45, 30, 99).save(edited)
    later = time.time() + 10
    os.utime(edited, (later, later))
    third = decode_images(dataset, samples, 24, "disk", cache_dir)
    assert len(list(cache_dir.glob("*.npy"))) == 3
    assert not list(cache_dir.glob("*.partial"))
    assert torch.equal(third.images, _expected(dataset, 24))
    assert not torch.equal(third.images[0], first.images[0])
    assert torch.equal(third.images[1:], first.images[1:])


def test_decode_images_rejects_a_stale_shape(tmp_path: Path) -> None:
    """A cache file whose shape is not the dataset's is refused with a clear message."""
    dataset, samples = _image_folder(tmp_path / "folder")
    cache_dir = tmp_path / "cache"
    decode_images(dataset, samples, 8, "disk", cache_dir)
    (path,) = cache_dir.glob("*.npy")
    np.save(path, np.zeros((2, 3, 8, 8), dtype=np.uint8))
    with pytest.raises(ValueError, match="delete it"):
        decode_images(dataset, samples, 8, "disk", cache_dir)


def test_cache_mode_errors(tmp_path: Path) -> None:
    """Disk mode without a folder, and unknown modes, are refused by ``decode_images``,
    ``check_cache`` and the DataModule."""
    dataset, samples = _image_folder(tmp_path)
    with pytest.raises(ValueError, match="needs cache_dir"):
        decode_images(dataset, samples, 8, "disk")
    with pytest.raises(ValueError, match="cache must be one of 'memory', 'disk', got"):
        decode_images(dataset, samples, 8, "ram")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs cache_dir"):
        check_cache("disk", None)
    with pytest.raises(ValueError, match="cache must be one of 'none', 'memory', 'disk', got"):
        check_cache("ram", None)
    check_cache("none", None)
    check_cache("memory", None)
    check_cache("disk", str(tmp_path))
    with pytest.raises(ValueError, match="needs cache_dir"):
        ImageFolderDataModule(root=str(tmp_path), cache="disk")


# --------------------------------------------- 3. ImageFolderDataModule on the device
def _folder_dm(root: Path, **kwargs) -> ImageFolderDataModule:
    torch.manual_seed(0)  # the device views' seed and the loader's shuffle
    dm = ImageFolderDataModule(
        root=str(root), image_size=32, cache="memory", batch_size=64, num_workers=0, **kwargs
    )
    dm.setup("fit")
    return dm


def _within_source_range(views: Tensor, images: Tensor, dm: ImageFolderDataModule) -> Tensor:
    """``[B]`` bool: every channel of the un-normalised view stays within the range of that
    channel in its source image (true of crops, flips and bilinear resizing, not of jitter
    or grayscale)."""
    aug = dm.augmentation
    raw = _unnormalise(views, aug.mean, aug.std)
    source = images.float() / 255
    low = source.amin(dim=(2, 3)) - 1e-5
    high = source.amax(dim=(2, 3)) + 1e-5
    inside = (raw.amin(dim=(2, 3)) >= low) & (raw.amax(dim=(2, 3)) <= high)
    return inside.all(dim=1)


def test_image_folder_device_views(cifar_subset: Path) -> None:
    """The loader yields uint8 images; the transfer hook turns them into two float32 SimCLR
    views while training and leaves every other batch alone."""
    dm = _folder_dm(cifar_subset, augment_on="device")
    assert isinstance(dm.device_views, DeviceViews)
    batch = next(iter(dm.train_dataloader()))
    images, labels = batch
    assert images.shape == (64, 3, 32, 32) and images.dtype == torch.uint8
    assert labels.shape == (64,) and labels.dtype == torch.long
    assert dm.trainer is None and dm.on_after_batch_transfer(batch, 0) is batch

    dm.trainer = _fake_trainer()
    views, out_labels = dm.on_after_batch_transfer(batch, 0)
    assert out_labels is labels
    assert isinstance(views, list) and len(views) == 2
    for v in views:
        assert v.shape == (64, 3, 32, 32) and v.dtype == torch.float32
        assert torch.isfinite(v).all()
    assert not torch.equal(views[0], views[1])
    # Colour jitter and grayscale push about half the views outside their source's channel
    # ranges (the check the crop_flip test relies on can fail).
    outside = torch.cat([~_within_source_range(v, images, dm) for v in views])
    assert outside.float().mean() > 0.25

    dm.trainer.training = False
    assert dm.on_after_batch_transfer(batch, 0) is batch
    val_images, _ = next(iter(dm.val_dataloader()))
    assert val_images.dtype == torch.float32 and val_images.shape == (64, 3, 32, 32)


def test_image_folder_device_none_is_the_clean_transform(cifar_subset: Path) -> None:
    """``train_transform: none`` gives identical views equal to the CPU clean transform."""
    dm = _folder_dm(cifar_subset, augment_on="device", train_transform="none")
    images, labels = next(iter(dm.train_dataloader()))
    dm.trainer = _fake_trainer()
    views, _ = dm.on_after_batch_transfer((images, labels), 0)
    assert len(views) == 2 and torch.equal(views[0], views[1])
    clean = dm.augmentation.clean(resize=dm.eval_resize)
    expected = torch.stack([clean(image) for image in images])
    assert views[0].dtype == torch.float32
    torch.testing.assert_close(views[0], expected, atol=1e-5, rtol=0)


def test_image_folder_device_crop_flip_has_no_colour_ops(cifar_subset: Path) -> None:
    """``train_transform: crop_flip`` makes the crop-flip-only views: those of a
    BatchAugmentation of ``augmentation.crop_flip()`` with the same seed, every channel
    within its source range (no jitter, no grayscale)."""
    dm = _folder_dm(cifar_subset, augment_on="device", train_transform="crop_flip")
    assert dm.device_views is not None
    images, labels = next(iter(dm.train_dataloader()))
    dm.trainer = _fake_trainer()
    # Each training batch re-seeds the generator from (data seed, rank, batch count).
    reference = BatchAugmentation(dm.augmentation.crop_flip(), seed=dm._batch_seed())
    views, _ = dm.on_after_batch_transfer((images, labels), 0)
    expected = reference(images, n_views=2)
    assert all(torch.equal(a, b) for a, b in zip(views, expected, strict=True))
    params = reference.sample(10000, 32, 32)
    assert not params.jitter.any() and not params.gray.any() and params.flip.any()
    for v in views:
        assert v.shape == (64, 3, 32, 32) and v.dtype == torch.float32
        assert _within_source_range(v, images, dm).all()
    assert not torch.equal(views[0], views[1])


def test_image_folder_cpu_views_from_the_cache(cifar_subset: Path, check_batches) -> None:
    """With ``augment_on: cpu`` the same memory cache feeds per-image CPU views: two float
    views per batch, which the transfer hook leaves alone."""
    dm = _folder_dm(cifar_subset, augment_on="cpu")
    assert dm.device_views is None
    check_batches(dm)
    batch = next(iter(dm.train_dataloader()))
    dm.trainer = _fake_trainer()
    assert dm.on_after_batch_transfer(batch, 0) is batch


# ----------------------------------------------------------------- 4. the digits
def test_digits_device_views() -> None:
    """The digits yield uint8 ``[B, 1, 8, 8]`` and two float32 views after the hook."""
    torch.manual_seed(0)
    dm = DigitsDataModule(augment_on="device", num_workers=0, batch_size=64)
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))
    images, labels = batch
    assert images.shape == (64, 1, 8, 8) and images.dtype == torch.uint8
    assert labels.dtype == torch.long and labels.max() < 10
    dm.trainer = _fake_trainer()
    views, out_labels = dm.on_after_batch_transfer(batch, 0)
    assert out_labels is labels and len(views) == 2
    aug = dm.augmentation
    for v in views:
        assert v.shape == (64, 1, 8, 8) and v.dtype == torch.float32
        raw = _unnormalise(v, aug.mean, aug.std)
        assert raw.min() >= -1e-5 and raw.max() <= 1 + 1e-5
    assert not torch.equal(views[0], views[1])
    dm.trainer.training = False
    assert dm.on_after_batch_transfer(batch, 0) is batch
    val_images, _ = next(iter(dm.val_dataloader()))
    assert val_images.shape == (64, 1, 8, 8) and val_images.dtype == torch.float32


# ---------------------------------------------------------- 5. loader workers
def test_default_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    """One worker per available core less one, split among the local ranks, at least 1
    and no fixed cap; at most 2 with ``augment_on: device`` (tests/data/test_loader_defaults
    has the rest)."""
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    for mode in ("cpu", "device"):
        workers = default_workers(mode)
        assert isinstance(workers, int) and workers >= 1
    assert default_workers("device") <= 2

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(32)), raising=False)
    assert default_workers("cpu") == 31 and default_workers("device") == 2
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    assert default_workers("cpu") == 7 and default_workers("device") == 2
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "16")
    assert default_workers("cpu") == 1 and default_workers("device") == 1
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "64")
    assert default_workers("cpu") == 1


def test_augment_on_is_validated(tmp_path: Path) -> None:
    """An unknown ``augment_on`` names the choices; ``num_workers=None`` with
    ``augment_on: device`` picks at most 2 workers for cached images, as many as ``cpu``
    when the workers decode the files."""
    with pytest.raises(ValueError, match=r"augment_on must be one of 'cpu', 'device'"):
        DigitsDataModule(augment_on="gpu")  # type: ignore[arg-type]
    (tmp_path / "train" / "a").mkdir(parents=True)
    root = str(tmp_path)
    dm = ImageFolderDataModule(root=root, num_workers=None, augment_on="device", cache="memory")
    assert 1 <= dm.num_workers <= 2
    dm = ImageFolderDataModule(root=root, num_workers=None, augment_on="device")
    assert dm.num_workers == default_workers("cpu")


# --------------------------------------------------------- 6. a real Lightning fit
class _RecordBatches(L.Callback):
    def __init__(self) -> None:
        self.train: list[tuple] = []
        self.val: list[tuple] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        views, labels = batch
        self.train.append((type(views), [(tuple(v.shape), v.dtype) for v in views], labels))

    def on_validation_batch_start(
        self, trainer, pl_module, batch, batch_idx, dataloader_idx=0
    ) -> None:
        images, labels = batch
        self.val.append((type(images), tuple(images.shape), images.dtype, labels))


def test_lightning_fit_makes_views_on_the_device() -> None:
    """Inside ``Trainer.fit`` the hook turns every uint8 training batch into two float32
    views before the method sees it; validation batches stay clean float images."""
    L.seed_everything(0, verbose=False)
    model = NCL(
        SmallCNN(1, 8, 32), proj_hidden_dim=32, proj_output_dim=16, num_classes=10, batch_size=32
    )
    recorder = _RecordBatches()
    trainer = L.Trainer(
        max_epochs=1,
        limit_train_batches=2,
        limit_val_batches=1,
        logger=False,
        enable_checkpointing=False,
        accelerator="cpu",
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[recorder],
    )
    dm = DigitsDataModule(batch_size=32, num_workers=0, augment_on="device")
    trainer.fit(model, dm)
    assert len(recorder.train) == 2 and recorder.val
    for kind, views, labels in recorder.train:
        assert kind is list
        assert views == [((32, 1, 8, 8), torch.float32)] * 2
        assert labels.shape == (32,)
    for kind, shape, dtype, _ in recorder.val:
        assert kind is torch.Tensor and dtype == torch.float32
        assert shape[1:] == (1, 8, 8) and 1 <= shape[0] <= 32
    assert torch.isfinite(trainer.callback_metrics["objective"])  # the epoch mean
