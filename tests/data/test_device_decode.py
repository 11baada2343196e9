"""``decode_on: device``: the loader yields the training JPEGs' bytes (padded to one
length, with their lengths), the transfer hook decodes them on the training device; the
settings it needs fail as one-line errors naming ``decode_on``. GPU decoding itself is
tested only where CUDA is."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader

from ncl_lightning.data import ImageFolderDataModule, ImageNet100DataModule
from ncl_lightning.data.decode import read_image
from ncl_lightning.data.device_decode import (
    PAD_MULTIPLE,
    EncodedBatch,
    EncodedFiles,
    decode_batch,
)
from ncl_lightning.data.memory import FixedSizeUInt8
from ncl_lightning.foundation.errors import ConfigError, CorruptImageError

SIZE = (128, 120)  # width, height of the test JPEGs


@pytest.fixture
def jpeg_folder(cifar_subset: Path, tmp_path: Path) -> Path:
    """``train`` and ``val`` folders of 2 classes x 4 real CIFAR images, upscaled JPEGs."""
    for split in ("train", "val"):
        for name in ("airplane", "cat"):
            files = sorted((cifar_subset / split / name).glob("*.png"))[:4]
            folder = tmp_path / split / name
            folder.mkdir(parents=True)
            for i, path in enumerate(files):
                image = Image.open(path).convert("RGB").resize(SIZE, Image.Resampling.BICUBIC)
                image.save(folder / f"{i}.jpg", "JPEG", quality=90)
    return tmp_path


def _samples(root: Path) -> list[tuple[str, int]]:
    files = sorted((root / "train").glob("*/*.jpg"))
    return [(str(path), int(path.parent.name == "cat")) for path in files]


def test_bytes_are_batched_padded_with_their_lengths(jpeg_folder: Path) -> None:
    samples = _samples(jpeg_folder)
    dataset = EncodedFiles(samples)
    keys = [(i, 1000 + i) for i in range(5)]  # EpochSampler's (index, seed) keys
    loader = DataLoader(dataset, batch_size=5, sampler=keys)
    batch = next(iter(loader))
    assert isinstance(batch, EncodedBatch)
    assert batch.data.dtype == torch.uint8 and batch.data.shape[0] == 5
    assert batch.data.shape[1] % PAD_MULTIPLE == 0
    assert batch.data.shape[1] - PAD_MULTIPLE < int(batch.lengths.max())
    assert batch.labels.tolist() == [label for _, label in samples[:5]]
    for i, (path, _) in enumerate(samples[:5]):
        raw = Path(path).read_bytes()
        n = int(batch.lengths[i])
        assert n == len(raw) and bytes(batch.data[i, :n].tolist()) == raw
        assert int(batch.data[i, n:].sum()) == 0


def test_decoded_batch_is_the_cpu_source(jpeg_folder: Path) -> None:
    """Decoded (here by libjpeg on the CPU) and resized to the square source: the images
    the ``decode_on: cpu`` workers make from PIL's decode, within JPEG decoders' rounding
    (mean absolute difference under 1 of 255)."""
    samples = _samples(jpeg_folder)[:4]
    batch = EncodedFiles(samples).__getitems__([0, 1, 2, 3])
    collated = EncodedBatch(*(torch.stack(field) for field in zip(*batch, strict=True)))
    images, labels = decode_batch(collated, 110, torch.device("cpu"))
    assert images.shape == (4, 3, 110, 110) and images.dtype == torch.uint8
    assert labels.tolist() == [label for _, label in samples]
    reference = torch.stack([FixedSizeUInt8(110)(read_image(path)) for path, _ in samples])
    difference = (images.float() - reference.float()).abs()
    assert difference.mean().item() < 1.0, difference.mean().item()


def test_a_file_that_is_no_jpeg_names_decode_on(cifar_subset: Path) -> None:
    png = str(next((cifar_subset / "train" / "cat").glob("*.png")))
    with pytest.raises(CorruptImageError, match="decode_on: cpu") as err:
        EncodedFiles([(png, 0)])[0]
    assert png in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"augment_on": "cpu"}, "decode_on: device needs augment_on: device"),
        ({"augment_on": "device", "cache": "memory"}, "decode_on: device needs cache: none"),
    ],
)
def test_settings_that_cannot_decode_on_the_device(
    jpeg_folder: Path, options: dict, message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        ImageFolderDataModule(str(jpeg_folder), image_size=96, decode_on="device", **options)
    assert err.value.key == "decode_on" and "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="decode_on") as err:
        ImageFolderDataModule(str(jpeg_folder), image_size=96, decode_on="gpu")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=message):
        ImageNet100DataModule(str(jpeg_folder), decode_on="device", **options)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error of a machine without CUDA")
def test_decode_on_device_without_cuda_fails_before_work(jpeg_folder: Path) -> None:
    dm = ImageFolderDataModule(
        str(jpeg_folder), image_size=96, batch_size=4, augment_on="device", decode_on="device"
    )
    with pytest.raises(ConfigError, match="CUDA is not available; set decode_on: cpu") as err:
        dm.setup("fit")
    assert err.value.key == "decode_on" and dm.train_dataset is None


def test_the_training_loader_yields_bytes_and_the_transfer_decodes_them(
    jpeg_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wiring, on the CPU (CUDA faked for the check): ``setup`` swaps the training
    set for the files' bytes, its workers are the device pipeline's 2 (they decode
    nothing), evaluation stays decoded on the CPU, and ``transfer_batch_to_device`` turns
    an encoded batch into the uint8 source batch the device views take."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    dm = ImageFolderDataModule(
        str(jpeg_folder), image_size=96, batch_size=4, num_workers=0, pin_memory=False,
        augment_on="device", decode_on="device",
    )  # fmt: skip
    assert not dm.reads_files
    dm.setup("fit")
    assert isinstance(dm.train_dataset, EncodedFiles)
    batch = next(iter(dm.train_dataloader()))
    assert isinstance(batch, EncodedBatch) and batch.data.shape[0] == 4
    images, labels = dm.transfer_batch_to_device(batch, torch.device("cpu"), 0)
    assert images.shape == (4, 3, dm.source_size, dm.source_size)
    assert images.dtype == torch.uint8 and labels.shape == (4,)
    val_images, _ = next(iter(dm.val_dataloader()))
    assert val_images.dtype == torch.float32 and val_images.shape[1:] == (3, 96, 96)
    views = dm.device_views(images, seed=0)
    assert len(views) == 2 and views[0].shape == (4, 3, 96, 96)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="nvJPEG needs a CUDA GPU")
def test_gpu_decode_matches_the_cpu_decode(jpeg_folder: Path) -> None:
    samples = _samples(jpeg_folder)
    items = EncodedFiles(samples).__getitems__(list(range(len(samples))))
    batch = EncodedBatch(*(torch.stack(field) for field in zip(*items, strict=True)))
    gpu, labels = decode_batch(batch, 110, torch.device("cuda"))
    cpu, _ = decode_batch(batch, 110, torch.device("cpu"))
    assert gpu.device.type == "cuda" and labels.device.type == "cuda"
    assert (gpu.cpu().float() - cpu.float()).abs().mean().item() < 1.0
