"""Image folders in the ``ImageFolder`` layout (``<split>/<class>/<image>``).

``ImageListDataset`` and ``scan_class_folders`` are shared by ``ImageFolderDataModule``
(any user folder) and ``ImageNet100DataModule`` (a fixed class subset). The scan walks
only the class folders it is given, so selecting 100 classes of a full ImageNet tree
never lists the other 900.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lightning.pytorch.utilities import rank_zero_info
from PIL import Image
from torch.utils.data import Dataset
from torchvision.datasets.folder import IMG_EXTENSIONS

from ncl_lightning.data.base import MultiViewDataModule, Split
from ncl_lightning.data.memory import CacheMode, check_cache, decode_images
from ncl_lightning.data.transforms import SimCLRAugmentation, scaled_augmentation


def require_dir(path: Path, what: str) -> Path:
    """Return ``path`` if it is a directory, else raise ``FileNotFoundError`` naming it."""
    if not path.is_dir():
        raise FileNotFoundError(f"{what} folder not found: {path}")
    return path


def list_class_folders(split_dir: Path) -> list[str]:
    """Sorted names of the sub-folders (classes) of ``split_dir``; a clear error if none."""
    require_dir(split_dir, "split")
    classes = sorted(e.name for e in os.scandir(split_dir) if e.is_dir())
    if not classes:
        raise FileNotFoundError(f"no class folders in {split_dir} (expected <class>/<image>)")
    return classes


def scan_class_folders(split_dir: Path, classes: Sequence[str]) -> list[tuple[str, int]]:
    """List the images of the given class folders, label = position in ``classes``.

    Args:
        split_dir: Folder holding one sub-folder per class.
        classes: Class folder names in label order.

    Returns:
        ``(path, label)`` pairs, sorted by class then path.

    Raises:
        FileNotFoundError: ``split_dir`` or a class folder is missing, or a class folder
            holds no image.
    """
    require_dir(split_dir, "split")
    samples: list[tuple[str, int]] = []
    for label, name in enumerate(classes):
        class_dir = split_dir / name
        if not class_dir.is_dir():
            raise FileNotFoundError(f"class folder {name!r} missing in {split_dir}")
        found = sorted(
            os.path.join(dirpath, f)
            for dirpath, _, files in os.walk(class_dir, followlinks=True)
            for f in files
            if f.lower().endswith(IMG_EXTENSIONS)
        )
        if not found:
            raise FileNotFoundError(f"class folder {class_dir} holds no image files")
        samples.extend((path, label) for path in found)
    return samples


class ImageListDataset(Dataset):
    """``(PIL RGB image, label)`` items from a list of ``(path, label)`` pairs.

    Args:
        samples: ``(path, label)`` pairs, e.g. from ``scan_class_folders``.
        classes: Class names in label order.
    """

    def __init__(self, samples: list[tuple[str, int]], classes: Sequence[str]) -> None:
        self.samples = samples
        self.classes = list(classes)
        self.class_to_idx = {c: i for i, c in enumerate(self.classes)}
        self.targets = [label for _, label in samples]

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[Image.Image, int]:
        path, label = self.samples[index]
        with open(path, "rb") as f:
            image = Image.open(f).convert("RGB")
        return image, label


class DecodedCacheMixin:
    """The decoded-once cache of an image-folder DataModule: ``__init__`` calls
    :meth:`use_cache`, ``build_split`` wraps its dataset in :meth:`decoded`; the
    DataModule has ``num_workers`` and ``source_size``."""

    cache: CacheMode
    cache_dir: str | None
    num_workers: int
    source_size: int

    def use_cache(self, cache: CacheMode, cache_dir: str | None) -> None:
        """Check and keep the ``cache`` mode and ``cache_dir`` (one-line error if invalid)."""
        check_cache(cache, cache_dir)
        self.cache, self.cache_dir = cache, cache_dir

    def decoded(self, dataset: ImageListDataset) -> Dataset:
        """``dataset`` itself without a cache, else its images decoded once to uint8."""
        if self.cache == "none":
            return dataset
        return decode_images(
            dataset,
            dataset.samples,
            self.source_size,
            self.cache,
            self.cache_dir,
            num_workers=self.num_workers,
        )


class ImageFolderDataModule(DecodedCacheMixin, MultiViewDataModule):
    """Any image folder in ``ImageFolder`` layout: ``root/<split>/<class>/<image>``.

    Classes are the sorted sub-folders of the training folder; the validation (and test)
    folder must hold the same classes. Without ``test_dir`` the test split is the
    validation folder (most small folders have no held-out test split; ``setup`` logs
    this choice). Evaluation images are resized (shorter side) and
    center-cropped to ``image_size``.

    Args:
        root: Dataset root, e.g. ``../shared/data/cifar10-real-subset``.
        train_dir: Training folder, relative to ``root``.
        val_dir: Validation folder, relative to ``root``.
        test_dir: Test folder, relative to ``root``; ``None`` uses ``val_dir``.
        image_size: Side of the batched images; the default augmentation is the CIFAR
            recipe up to 64 px and the ImageNet recipe above.
        cache: Decode every image once, resized (shorter side) and centre-cropped to
            :attr:`source_size`, into uint8: ``none`` (decode per item, every epoch),
            ``memory`` (a tensor in RAM, per process) or ``disk`` (a memory-mapped file
            in ``cache_dir``, written once, shared by the ranks and later runs). The
            random crops then come from that square, not the full original image.
        cache_dir: Folder of the ``disk`` cache.
        **kwargs: Loader and view options of :class:`MultiViewDataModule` (``batch_size``,
            ``num_workers``, ``n_views``, ``augmentation``, ``augment_on``, ...).

    Raises:
        FileNotFoundError: At construction if ``root/train_dir`` is missing or holds no
            class folder; at ``setup`` if a split folder, a class folder of a split, or
            any image of a class is missing.
        ValueError: At ``setup`` if a split has class folders the training folder lacks.
    """

    def __init__(
        self,
        root: str,
        train_dir: str = "train",
        val_dir: str = "val",
        test_dir: str | None = None,
        image_size: int = 32,
        cache: CacheMode = "none",
        cache_dir: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if image_size <= 0:
            raise ValueError(f"image_size must be > 0, got {image_size}")
        self.use_cache(cache, cache_dir)
        self.root = Path(root).expanduser()
        self.split_dirs: dict[Split, str] = {
            "train": train_dir,
            "val": val_dir,
            "test": test_dir if test_dir is not None else val_dir,
        }
        # Listing one folder is cheap and gives num_classes to the CLI at instantiation.
        self.classes = list_class_folders(self.root / train_dir)
        self.num_classes = len(self.classes)
        self.in_channels = 3
        self.image_size = image_size
        self.eval_resize = image_size if image_size <= 64 else round(image_size * 256 / 224)

    def default_augmentation(self) -> SimCLRAugmentation:
        """CIFAR recipe scaled to ``image_size`` (ImageNet recipe above 64 px)."""
        return scaled_augmentation(self.image_size)

    def build_split(self, split: Split) -> Dataset:
        """Scan ``root/<split dir>`` for the training classes."""
        if split == "test" and self.split_dirs["test"] == self.split_dirs["val"]:
            val_dir = self.root / self.split_dirs["val"]
            rank_zero_info(f"{type(self).__name__}: test_dir is None, testing on {val_dir}")
            return self.base_dataset("val")
        split_dir = self.root / self.split_dirs[split]
        extra = sorted(set(list_class_folders(split_dir)) - set(self.classes))
        if extra:
            raise ValueError(
                f"{split_dir} has class folders absent from the training folder: {extra}"
            )
        return self.decoded(
            ImageListDataset(scan_class_folders(split_dir, self.classes), self.classes)
        )
