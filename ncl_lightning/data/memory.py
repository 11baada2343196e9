"""In-memory uint8 image datasets and the decoded-once cache of image folders.

Small datasets (CIFAR, the digits) are held as one uint8 tensor ``[N, C, H, W]``, the form
the device augmentation takes; image folders can be decoded once into the same form
([`decode_images`][]), in memory or in a memory-mapped ``.npy`` file that later runs and
the other ranks reuse, written by [`ncl_lightning.foundation.disk.atomic_write`][] (a full
disk is one [`DiskFullError`][ncl_lightning.foundation.errors.DiskFullError] before the
decoding starts, never a SIGBUS or a half-written cache).
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import re
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal, get_args

import numpy as np
import torch
from lightning.pytorch.utilities import rank_zero_info
from PIL import Image
from torch import Tensor
from torch.utils.data import DataLoader, Dataset
from torchvision.transforms import v2

from ncl_lightning.data.decode import corrupt_image_error
from ncl_lightning.foundation.disk import atomic_write, format_bytes, host_tag, remove_stale
from ncl_lightning.foundation.errors import ConfigError, CorruptImageError, DataError, UsageError
from ncl_lightning.foundation.validation import check_choice, check_shape

CacheMode = Literal["none", "memory", "disk"]


class TensorImageDataset(Dataset):
    """``(image [C, H, W], label)`` items from in-memory tensors.

    Args:
        images: ``[N, C, H, W]``: uint8 in [0, 255] (the compact form every pipeline
            takes) or float in [0, 1].
        labels: Integer tensor ``[N]``.
    """

    def __init__(self, images: Tensor | np.ndarray, labels: Tensor | Sequence[int]) -> None:
        images = torch.as_tensor(images)
        labels = torch.as_tensor(labels)
        check_shape("images", images, ("N", "C", "H", "W"))
        if len(images) != len(labels):
            raise ConfigError(f"{len(images)} images but {len(labels)} labels", key="labels")
        self.images = images
        self.labels = labels.long()

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> tuple[Tensor, int]:
        return self.images[index], int(self.labels[index])


class DecodedImages(TensorImageDataset):
    """The images of an image folder decoded once ([`decode_images`][]), without the
    rows of the files that could not be decoded.

    Args:
        images: uint8 ``[N, 3, S, S]``, one row per scanned file.
        labels: ``[N]``.
        skipped: ``(index, path, reason)`` of the unreadable files (their rows are left
            out of the items).

    Attributes:
        skipped: ``(path, reason)`` of the unreadable files.
    """

    def __init__(
        self,
        images: Tensor | np.ndarray,
        labels: Tensor | Sequence[int],
        skipped: Sequence[tuple[int, str, str]] = (),
    ) -> None:
        super().__init__(images, labels)
        self.skipped = [(path, reason) for _, path, reason in skipped]
        dropped = {index for index, _, _ in skipped}
        self.keep = (
            torch.tensor([i for i in range(len(self.labels)) if i not in dropped])
            if dropped
            else None
        )

    def __len__(self) -> int:
        return len(self.labels) if self.keep is None else len(self.keep)

    def __getitem__(self, index: int) -> tuple[Tensor, int]:
        return super().__getitem__(index if self.keep is None else int(self.keep[index]))


def to_pil(image: Any) -> Any:
    """A uint8 tensor ``[C, H, W]`` as a PIL image (PIL's ops are the fastest per-image
    CPU augmentation); anything else unchanged."""
    if isinstance(image, Tensor) and image.dtype == torch.uint8:
        array = image.permute(1, 2, 0).numpy()
        return Image.fromarray(array[..., 0] if array.shape[2] == 1 else array)
    return image


class FixedSizeUInt8:
    """Any image (PIL, uint8 or float tensor) to uint8 ``[C, size, size]``: shorter side
    resized to ``size`` (antialiased), then centre-cropped; a no-op on images of that size.

    Args:
        size: Output side.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self._resize = v2.Compose([v2.Resize(size, antialias=True), v2.CenterCrop(size)])

    def __call__(self, image: Any) -> Tensor:
        if isinstance(image, Image.Image):
            image = v2.functional.pil_to_tensor(
                image.convert("RGB") if image.mode not in ("RGB", "L") else image
            )
        elif image.dtype != torch.uint8:
            image = (image * 255.0).round().clamp(0, 255).to(torch.uint8)
        if tuple(image.shape[-2:]) != (self.size, self.size):
            image = self._resize(image)
        return image


def _cache_key(samples: Sequence[tuple[str, int]], size: int) -> str:
    digest = hashlib.sha1(f"{size}\n".encode())
    for path, label in samples:
        stat = os.stat(path)
        digest.update(f"{path}\t{label}\t{stat.st_size}\t{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


class _Decode(Dataset):
    """``(uint8 image, "")``, or with ``skip_corrupt`` ``(zeros, reason)`` for a file that
    cannot be decoded (the check is the decode itself: nothing is read twice)."""

    def __init__(self, dataset: Dataset, size: int, skip_corrupt: bool = False) -> None:
        self.dataset, self.to_uint8 = dataset, FixedSizeUInt8(size)
        self.size, self.skip_corrupt = size, skip_corrupt

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, index: int) -> tuple[Tensor, str]:
        try:
            return self.to_uint8(self.dataset[index][0]), ""
        except CorruptImageError as err:
            if not self.skip_corrupt:
                raise
            blank = torch.zeros(3, self.size, self.size, dtype=torch.uint8)
            return blank, getattr(err, "reason", str(err))


def _decode_into(
    put: Callable[[int, Tensor], None],
    dataset: Dataset,
    size: int,
    num_workers: int,
    samples: Sequence[tuple[str, int]],
    skip_corrupt: bool = False,
) -> list[tuple[int, str, str]]:
    """Decode ``dataset`` in order, handing each batch to ``put(first row, batch)``;
    return ``(index, path, reason)`` of skipped files."""
    decode = _Decode(dataset, size, skip_corrupt)
    loader = DataLoader(decode, batch_size=64, num_workers=num_workers)
    start, skipped = 0, []
    for batch, reasons in loader:
        put(start, batch)
        skipped += [(start + i, samples[start + i][0], r) for i, r in enumerate(reasons) if r]
        start += len(batch)
    return skipped


def npy_header(shape: tuple[int, ...]) -> bytes:
    """The ``.npy`` header of a C-ordered uint8 array of ``shape``."""
    buffer = io.BytesIO()
    header = {"descr": np.lib.format.dtype_to_descr(np.dtype(np.uint8)),
              "fortran_order": False, "shape": shape}  # fmt: skip
    np.lib.format.write_array_header_1_0(buffer, header)
    return buffer.getvalue()


#: Temporary files of the cache: ``<key>[.skipped].<host>-<pid>.partial`` (an older
#: ``<key>.<pid>.partial`` is of this host).
PARTIAL = re.compile(r"^[0-9a-f]+(\.skipped)?\.((?P<host>[A-Za-z0-9-]+)-)?(?P<pid>\d+)\.partial$")
CACHE_HINT = (
    "set data.init_args.cache_dir to another disk, or data.init_args.cache: memory (or none)"
)


def _partial(path: Path) -> Path:
    return path.with_suffix(f".{host_tag()}-{os.getpid()}.partial")


def _write_cache(
    path: Path,
    record: Path,
    dataset: Dataset,
    samples: Sequence[tuple[str, int]],
    shape: tuple[int, int, int, int],
    num_workers: int,
    skip_corrupt: bool,
) -> None:
    """Decode into ``path`` (a ``.npy`` file) through the one disk-write path: the free
    space checked and the file's blocks reserved before the first image is decoded, the
    rows written in order (no memory map of a sparse file: no SIGBUS on a full disk),
    the file renamed into place once complete; the files left out go to ``record``."""
    header = npy_header(shape)
    size = len(header) + math.prod(shape)
    rank_zero_info(f"decoding {len(samples)} images once into {path} ({format_bytes(size)})")
    with atomic_write(path, size=size, preallocate=True, temp=_partial(path), hint=CACHE_HINT) as f:
        f.write(header)
        written = []  # rows come in order (the loader does not shuffle)

        def put(start: int, batch: Tensor) -> None:
            f.write(batch.numpy().tobytes())
            written.append(len(batch))

        skipped = _decode_into(put, dataset, shape[-1], num_workers, samples, skip_corrupt)
        if sum(written) != shape[0]:
            raise UsageError(
                f"the dataset gave {sum(written)} images for {shape[0]} samples; pass the "
                "samples the dataset was built from"
            )
        if skipped:  # before the cache itself: a reader of the .npy finds its record
            with atomic_write(record, temp=_partial(record), hint=CACHE_HINT) as g:
                g.write(json.dumps(skipped).encode())
        else:
            record.unlink(missing_ok=True)  # left by a deleted cache of the same key


def decode_images(
    dataset: Dataset,
    samples: Sequence[tuple[str, int]],
    size: int,
    mode: CacheMode,
    cache_dir: str | Path | None = None,
    num_workers: int = 0,
    skip_corrupt: bool = False,
) -> DecodedImages:
    """Decode every image of an image-folder dataset once into uint8 ``[N, 3, S, S]``.

    Args:
        dataset: Items ``(PIL image, label)`` (an ``ImageListDataset``).
        samples: Its ``(path, label)`` list: the labels, and the cache key (paths, sizes
            and modification times, so an edited folder is decoded again).
        size: Side ``S`` the images are stored at (shorter side resized, centre-cropped).
        mode: ``memory`` (a tensor in RAM) or ``disk`` (a memory-mapped
            ``<cache_dir>/<key>.npy``, written once and reused by later runs).
        cache_dir: Folder of the ``disk`` cache files.
        num_workers: Decoding processes.
        skip_corrupt: Leave out the files that cannot be decoded (listed in the result's
            ``skipped``; the ``disk`` cache records them beside the ``.npy`` file) instead
            of raising. The check is the decode pass itself.

    Returns:
        A [`DecodedImages`][] of uint8 images.

    Raises:
        CorruptImageError: A file cannot be decoded and ``skip_corrupt`` is false (also
            when a ``disk`` cache written with ``skip_corrupt`` recorded one).
        DiskFullError: The ``disk`` cache does not fit (checked before decoding; the
            message names the file, the space it needs and the space free).
    """
    check_cache(mode, cache_dir, ("memory", "disk"))
    labels = torch.tensor([label for _, label in samples], dtype=torch.long)
    shape = (len(samples), 3, size, size)
    if mode == "memory":
        images = torch.empty(shape, dtype=torch.uint8)

        def put(start: int, batch: Tensor) -> None:
            images[start : start + len(batch)] = batch

        skipped = _decode_into(put, dataset, size, num_workers, samples, skip_corrupt)
        return DecodedImages(images, labels, skipped)
    folder = Path(cache_dir).expanduser()  # type: ignore[arg-type]
    path = folder / f"{_cache_key(samples, size)}.npy"
    record = path.with_suffix(".skipped.json")  # files left out when the cache was written
    if not path.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        remove_stale(folder, PARTIAL)  # of decoders that were killed
        _write_cache(path, record, dataset, samples, shape, num_workers, skip_corrupt)
    skipped = [tuple(s) for s in json.loads(record.read_text())] if record.is_file() else []
    if skipped and not skip_corrupt:
        _, bad_path, reason = skipped[0]
        raise corrupt_image_error(bad_path, reason)
    images = np.load(path, mmap_mode="r")
    if images.shape != shape:
        raise DataError(f"cache file {path} holds {images.shape}, expected {shape}; delete it")
    with warnings.catch_warnings():  # read-only map: nothing writes into dataset images
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return DecodedImages(torch.from_numpy(images), labels, skipped)  # type: ignore[arg-type]


def check_cache(
    mode: str, cache_dir: str | Path | None, modes: tuple[str, ...] = get_args(CacheMode)
) -> None:
    """Raise [`ConfigError`][] for a cache mode not in ``modes`` or ``disk`` without
    ``cache_dir``."""
    check_choice("cache", mode, modes)
    if mode == "disk" and not cache_dir:
        raise ConfigError(
            "data.init_args.cache_dir: cache='disk' needs cache_dir (a folder for the "
            "decoded images)",
            key="cache_dir",
        )
