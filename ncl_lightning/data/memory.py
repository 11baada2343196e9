"""In-memory uint8 image datasets and the decoded-once cache of image folders.

Small datasets (CIFAR, the digits) are held as one uint8 tensor ``[N, C, H, W]``: a
quarter of the float32 memory, shared by fork with the loader workers, and exactly what
the batched device augmentation (:class:`~ncl_lightning.data.batch_augmentation.
BatchAugmentation`) wants. Image folders can be decoded once into the same form
(:func:`decode_images`), in memory or in a memory-mapped ``.npy`` file that later runs
(and the other DDP ranks of a node) reuse, so JPEG decoding leaves the training loop.
"""

from __future__ import annotations

import hashlib
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, get_args

import numpy as np
import torch
from lightning.pytorch.utilities import rank_zero_info
from PIL import Image
from torch import Tensor
from torch.utils.data import DataLoader, Dataset
from torchvision.transforms import v2

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
        if images.dim() != 4:
            raise ValueError(f"images must be [N, C, H, W], got shape {tuple(images.shape)}")
        if len(images) != len(labels):
            raise ValueError(f"{len(images)} images but {len(labels)} labels")
        self.images = images
        self.labels = labels.long()

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> tuple[Tensor, int]:
        return self.images[index], int(self.labels[index])


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
    def __init__(self, dataset: Dataset, size: int) -> None:
        self.dataset, self.to_uint8 = dataset, FixedSizeUInt8(size)

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, index: int) -> Tensor:
        return self.to_uint8(self.dataset[index][0])


def _decode_into(out: Any, dataset: Dataset, size: int, num_workers: int) -> None:
    loader = DataLoader(_Decode(dataset, size), batch_size=64, num_workers=num_workers)
    start = 0
    for batch in loader:
        out[start : start + len(batch)] = batch.numpy() if isinstance(out, np.ndarray) else batch
        start += len(batch)


def decode_images(
    dataset: Dataset,
    samples: Sequence[tuple[str, int]],
    size: int,
    mode: CacheMode,
    cache_dir: str | Path | None = None,
    num_workers: int = 0,
) -> TensorImageDataset:
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

    Returns:
        A :class:`TensorImageDataset` of uint8 images.
    """
    labels = torch.tensor([label for _, label in samples], dtype=torch.long)
    shape = (len(samples), 3, size, size)
    if mode == "memory":
        images = torch.empty(shape, dtype=torch.uint8)
        _decode_into(images, dataset, size, num_workers)
        return TensorImageDataset(images, labels)
    if mode != "disk":
        raise ValueError(f"cache mode must be 'memory' or 'disk', got {mode!r}")
    if cache_dir is None:
        raise ValueError("cache='disk' needs cache_dir (a folder for the decoded images)")
    folder = Path(cache_dir).expanduser()
    path = folder / f"{_cache_key(samples, size)}.npy"
    if not path.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.partial")
        rank_zero_info(f"decoding {len(samples)} images once into {path}")
        array = np.lib.format.open_memmap(partial, mode="w+", dtype=np.uint8, shape=shape)
        _decode_into(array, dataset, size, num_workers)
        array.flush()
        del array
        os.replace(partial, path)  # atomic: a killed run never leaves a half-written cache
    images = np.load(path, mmap_mode="r")
    if images.shape != shape:
        raise ValueError(f"cache file {path} holds {images.shape}, expected {shape}; delete it")
    with warnings.catch_warnings():  # read-only map: nothing writes into dataset images
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return TensorImageDataset(torch.from_numpy(images), labels)


def check_cache(mode: str, cache_dir: str | None) -> None:
    """Raise ``ValueError`` for an unknown cache mode or ``disk`` without ``cache_dir``."""
    if mode not in get_args(CacheMode):
        raise ValueError(f"cache must be one of {list(get_args(CacheMode))}, got {mode!r}")
    if mode == "disk" and not cache_dir:
        raise ValueError("cache='disk' needs cache_dir (a folder for the decoded images)")
