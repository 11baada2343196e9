"""Image strips of an atlas: one file per dimension, its top-activating images in a row.

One file per dimension keeps a 2,048-dimension atlas at 2,048 requests (the page loads them
lazily) instead of 32,768 single images. Strips are written one at a time from images read
by index, with a cache of decoded images bounded in bytes (the same image tops many dimensions), so
memory does not grow with the number of dimensions.

Small images (scikit-learn's 8x8 digits) are stored nearest-neighbour upscaled by an integer
factor ([`upscale_factor`][]: blocks of equal pixels, no blur) to the size a card shows them,
so a strip is legible in any viewer (W&B panels, an image opened on its own, a paper), not
only in a browser that honours ``image-rendering: pixelated``; grey images are stored with
one grey channel.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from PIL import Image
from torch.utils.data import Dataset

from ncl_lightning.atlas.schema import image_path
from ncl_lightning.foundation.validation import check_choice, check_int
from ncl_lightning.plot.pictures import to_uint8

# How each format is saved: PNG is lossless (small images, digits), JPEG and WebP lossy and
# several times smaller on photographs (CIFAR, ImageNet).
IMAGE_FORMATS: dict[str, dict[str, object]] = {
    "png": {"format": "PNG", "compress_level": 6},
    "jpeg": {"format": "JPEG", "quality": 90},
    "webp": {"format": "WEBP", "quality": 90, "method": 4},
}


CARD_SIDE = 40  # CSS pixels of one card image: CARD_CELL of static/cards.js


def upscale_factor(height: int, width: int, target: int = CARD_SIDE) -> int:
    """The integer factor that brings an image's longer side closest to ``target`` without
    passing it (at least 1: large images are stored as they are). 8x8 digits: 5 (40x40)."""
    return max(1, target // max(height, width))


def upscale(image: np.ndarray, factor: int) -> np.ndarray:
    """``[H, W, ...]`` -> ``[H * factor, W * factor, ...]``, each pixel a ``factor`` x
    ``factor`` block (nearest neighbour)."""
    return np.repeat(np.repeat(image, factor, axis=0), factor, axis=1)


class ImageReader:
    """Images ``uint8 [H, W, 3]`` and labels of a dataset of ``(image [C, H, W]
    normalised with mean and std, label)`` by index, with an LRU cache of ``cache_mib`` MiB
    of decoded samples (about 10,000 CIFAR images or 700 ImageNet ones at the default)."""

    def __init__(
        self,
        dataset: Dataset,
        mean: Sequence[float],
        std: Sequence[float],
        cache_mib: float = 100.0,
    ) -> None:
        self.dataset, self.mean, self.std = dataset, mean, std
        self.budget = int(cache_mib * 2**20)
        self._kept: OrderedDict[int, tuple[np.ndarray, int]] = OrderedDict()
        self._bytes = 0

    def __call__(self, index: int) -> np.ndarray:
        """The image ``uint8 [H, W, 3]`` of sample ``index``."""
        return self._item(index)[0]

    def label(self, index: int) -> int:
        """The class label of sample ``index``."""
        return self._item(index)[1]

    def _item(self, index: int) -> tuple[np.ndarray, int]:
        if index in self._kept:
            self._kept.move_to_end(index)
            return self._kept[index]
        image, label = self.dataset[index][:2]
        item = (to_uint8(image[None], self.mean, self.std)[0], int(label))
        self._kept[index] = item
        self._bytes += item[0].nbytes
        while self._bytes > self.budget and len(self._kept) > 1:
            self._bytes -= self._kept.popitem(last=False)[1][0].nbytes
        return item


def strip(images: Sequence[np.ndarray], scale: int = 1) -> Image.Image:
    """Images ``[H, W, 3]`` of one size side by side, left to right, each upscaled by
    ``scale`` (nearest neighbour); a grey picture (equal channels) as one channel (mode L,
    drawn with the grey colour map)."""
    pixels = np.concatenate(list(images), axis=1)
    if (pixels == pixels[..., :1]).all():  # tested before upscaling: scale² fewer pixels
        return Image.fromarray(np.ascontiguousarray(upscale(pixels[..., 0], scale)), mode="L")
    return Image.fromarray(upscale(pixels, scale))


def write_strips(
    site: Path,
    key: str,
    tops: Sequence[Sequence[int]],
    read: Callable[[int], np.ndarray],
    ext: str,
    scale: int = 1,
) -> list[Path]:
    """Write the strip of every dimension ``j`` with a non-empty ``tops[j]`` (its dataset
    indices, in strip order, each image ``read``, upscaled by ``scale``) at
    ``<site>/img/<key>/<j>.<ext>``; return the files written."""
    check_choice("image_format", ext, tuple(IMAGE_FORMATS))
    check_int("scale", scale)
    options = IMAGE_FORMATS[ext]
    written = []
    for dim, indices in enumerate(tops):
        if not indices:
            continue
        path = site / image_path(key, dim, ext)
        path.parent.mkdir(parents=True, exist_ok=True)
        strip([read(int(i)) for i in indices], scale).save(path, **options)
        written.append(path)
    return written
