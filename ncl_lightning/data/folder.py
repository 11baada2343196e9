"""Image folders in the ``ImageFolder`` layout (``<split>/<class>/<image>``).

``ImageListDataset`` and ``scan_class_folders`` are shared by ``ImageFolderDataModule``
(any user folder), ``ImageNet100DataModule`` (a fixed class subset) and the OOD sets. The
scan walks only the class folders it is given, so selecting 100 classes of a full
ImageNet tree never lists the other 900. Directory links are followed by the rules of
[`ncl_lightning.data.scan`][] (never back into the dataset; outside it, once), with one
warning per split counting the links skipped. Every error names the config key and the
path.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lightning.pytorch.utilities import rank_zero_info
from torch.utils.data import Dataset
from torchvision.datasets.folder import IMG_EXTENSIONS

from ncl_lightning.data.base import MultiViewDataModule, Split
from ncl_lightning.data.device_decode import DecodeOn
from ncl_lightning.data.folder_cache import (
    DecodedCacheMixin,
    ImageListDataset,
    listing,
    verify_images,
    warn_skipped,
)
from ncl_lightning.data.memory import CacheMode
from ncl_lightning.data.scan import FolderScan, warn_skipped_links
from ncl_lightning.data.transforms import SimCLRAugmentation, scaled_augmentation
from ncl_lightning.foundation.errors import DataError, DataNotFoundError
from ncl_lightning.foundation.validation import check_int


def require_dir(path: Path, what: str, key: str = "data", expected: str = "") -> Path:
    """Return ``path`` if it is a directory, else raise [`DataNotFoundError`][].

    Args:
        path: The folder.
        what: What it is, e.g. ``"ImageNet-100 train"``.
        key: The config key that sets it, e.g. ``data.init_args.root``.
        expected: What it should hold, e.g. ``"<class>/<image>"``.
    """
    if not path.is_dir():
        detail = f" (expected {expected})" if expected else ""
        raise DataNotFoundError(f"{key}: {what} folder not found: {path}{detail}")
    return path


def scan_class_folders(
    split_dir: Path,
    classes: Sequence[str],
    key: str = "data",
    what: str = "",
    hint: str = "",
    scan: FolderScan | None = None,
) -> list[tuple[str, int]]:
    """List the images of the given class folders, label = position in ``classes``.

    Only directory listings: no image is opened. Directory links are followed by the
    rules of [`ncl_lightning.data.scan`][]; the links skipped (also those met by
    ``scan`` while listing the classes) are counted in one warning.

    Args:
        split_dir: Folder holding one sub-folder per class.
        classes: Class folder names in label order.
        key: Config key named in the errors (the setting that points at the folder).
        what: Name of the data set in the errors, e.g. ``"ImageNet-100"``.
        hint: Appended to the missing-class error, e.g. where the class list comes from.
        scan: The split's [`FolderScan`][ncl_lightning.data.scan.FolderScan], whose ``trees``
            are the dataset root and its split folders; ``None``: ``[split_dir]``.

    Returns:
        ``(path, label)`` pairs, sorted by class then path.

    Raises:
        DataNotFoundError: ``split_dir`` is missing, class folders are missing (all of
            them counted, the first ones named), or a class folder holds no image.
        DataError: A class folder is a link back into the dataset or to a folder
            already scanned.
    """
    require_dir(split_dir, "split", key, "<class>/<image>")
    missing = [name for name in classes if not (split_dir / name).is_dir()]
    if missing:
        raise DataNotFoundError(
            f"{key}: {what + ' ' if what else ''}class folder(s) missing under {split_dir}: "
            f"{listing(missing)} ({len(missing)} of {len(classes)} classes){hint}"
        )
    scan = scan or FolderScan([split_dir])
    samples: list[tuple[str, int]] = []
    for label, name in enumerate(classes):
        class_dir = split_dir / name
        refused = scan.enter(class_dir)
        if refused is not None:
            raise DataError(
                f"{key}: class folder {class_dir} is a link to {refused.target} "
                f"({refused.reason}); make it a folder or a link outside the dataset"
            )
        found = scan.files(class_dir, IMG_EXTENSIONS)
        if not found:
            raise DataNotFoundError(
                f"{key}: empty class folder: {class_dir} (no files with extensions "
                f"{', '.join(IMG_EXTENSIONS)})"
            )
        samples.extend((path, label) for path in found)
    warn_skipped_links(scan.skipped, split_dir, key)
    return samples


class ImageFolderDataModule(DecodedCacheMixin, MultiViewDataModule):
    """Any image folder in ``ImageFolder`` layout: ``root/<split>/<class>/<image>``.

    Classes are the sorted sub-folders of the training folder; the validation (and test)
    folder must hold the same classes. A training folder of images without class
    folders, or with one class folder, is unlabelled data: ``num_classes`` is 0 (the
    online probe, kNN monitor and class metrics are off; one notice says so) and every
    image under each split folder is read. Without ``test_dir`` the test split is the
    validation folder (most small folders have no held-out test split; ``setup`` logs
    this choice). Evaluation images are resized (shorter side) and
    center-cropped to ``image_size``.

    Args:
        root: Dataset root, e.g. ``data/cifar10-subset``.
        train_dir: Training folder, relative to ``root``.
        val_dir: Validation folder, relative to ``root``.
        test_dir: Test folder, relative to ``root``; ``None`` uses ``val_dir``.
        image_size: Side of the batched images; the default augmentation is the CIFAR
            recipe up to 64 px and the ImageNet recipe above.
        cache: Decode every image once, resized (shorter side) and centre-cropped to
            ``source_size``, into uint8: ``none`` (decode per item, every epoch),
            ``memory`` (a tensor in RAM, per process) or ``disk`` (a memory-mapped file
            in ``cache_dir``, written once, shared by the ranks and later runs). The
            random crops then come from that square, not the full original image.
        cache_dir: Folder of the ``disk`` cache.
        skip_corrupt: Leave out the images that cannot be decoded (one warning per split
            naming them; listed in ``skipped_images``) instead of failing with
            [`CorruptImageError`][ncl_lightning.foundation.errors.CorruptImageError]. Cost: with
            ``cache: none``, ``setup`` decodes every image of the splits it builds once more (a
            thread pool); with a cache, the check is the cache's decode pass (free).
        decode_on: Where the training JPEGs are decoded with ``cache: none``: ``cpu``
            (PIL, in the loader workers) or ``device`` (nvJPEG on the training GPU, the
            workers only read the files: ``ncl_lightning.data.device_decode``; needs
            ``augment_on: device``, a CUDA trainer and JPEG files). Evaluation images are
            decoded on the CPU either way.
        **kwargs: Loader and view options of [`MultiViewDataModule`][] (``batch_size``,
            ``num_workers``, ``n_views``, ``augmentation``, ``augment_on``, ...).

    Raises:
        DataNotFoundError: At construction if ``root`` or ``root/train_dir`` is missing
            or holds no class folder; at ``check_inputs`` (called by ``setup``) if a
            split folder or a class folder of a split is missing, or a class folder
            holds no image.
        DataError: At ``check_inputs`` if a split has class folders the training
            folder lacks, or the training split is smaller than one batch.
        CorruptImageError: When an image cannot be decoded and ``skip_corrupt`` is false.
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
        skip_corrupt: bool = False,
        decode_on: DecodeOn = "cpu",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        check_int("image_size", image_size)
        self.use_cache(cache, cache_dir, skip_corrupt)
        self.use_decode(decode_on)
        self.root = Path(root).expanduser()
        self.split_dirs: dict[Split, str] = {
            "train": train_dir,
            "val": val_dir,
            "test": test_dir if test_dir is not None else val_dir,
        }
        self._split_keys: dict[Split, str] = {
            "train": "data.init_args.train_dir",
            "val": "data.init_args.val_dir",
            "test": "data.init_args.test_dir" if test_dir is not None else "data.init_args.val_dir",
        }
        # Listing one folder is cheap and gives num_classes to the CLI at instantiation.
        require_dir(self.root, "data", "data.init_args.root", f"{train_dir}/<class>/<image>")
        self.classes = self._training_classes(self.root / train_dir)
        self.num_classes = len(self.classes) if len(self.classes) > 1 else 0
        self.in_channels = 3
        self.image_size = image_size
        self.eval_resize = image_size if image_size <= 64 else round(image_size * 256 / 224)

    def _training_classes(self, train: Path) -> list[str]:
        """The class folders of ``train``; none (images directly in it) or one class: the
        images are unlabelled (``num_classes`` 0, one notice)."""
        key, scan = "data.init_args.train_dir", FolderScan([self.root, train])
        require_dir(train, "split", key, "<class>/<image>")
        classes = scan.subfolders(train)
        if len(classes) > 1:
            return classes
        if not classes and not scan.files(train, IMG_EXTENSIONS):
            raise DataNotFoundError(
                f"{key}: no class folders and no images in {train} (expected "
                "<class>/<image>, or the images themselves for unlabelled data)"
            )
        layout = f"one class folder ({classes[0]})" if classes else "images, no class folders"
        rank_zero_info(
            f"{type(self).__name__}: {train} holds {layout}: training without labels "
            "(num_classes 0: the online probe, the kNN monitor and the class metrics are off)"
        )
        return classes

    def default_augmentation(self) -> SimCLRAugmentation:
        """CIFAR recipe scaled to ``image_size`` (ImageNet recipe above 64 px)."""
        return scaled_augmentation(self.image_size)

    def split_folder(self, split: Split) -> Path:
        """``root/<split dir>``."""
        return self.root / self.split_dirs[split]

    def scan_split(self, split: Split) -> list[tuple[str, int]]:
        """The training classes' images in ``root/<split dir>``; no other class folder."""
        split_dir, key = self.split_folder(split), self._split_keys[split]
        scan = FolderScan([self.root, *(self.split_folder(s) for s in self.split_dirs)])
        if not self.classes:  # unlabelled: every image under the split folder, label 0
            require_dir(split_dir, "split", key, "<image>")
            found = scan.files(split_dir, IMG_EXTENSIONS)
            if not found:
                raise DataNotFoundError(
                    f"{key}: no images in {split_dir} (extensions {', '.join(IMG_EXTENSIONS)})"
                )
            warn_skipped_links(scan.skipped, split_dir, key)
            return [(path, 0) for path in found]
        require_dir(split_dir, "split", key, "<class>/<image>")
        extra = sorted(set(scan.subfolders(split_dir)) - set(self.classes))
        if extra:
            raise DataError(
                f"{key}: {split_dir} has class folder(s) absent from the training folder "
                f"{self.split_folder('train')}: {listing(extra)}"
            )
        hint = f"; the classes are the sub-folders of {self.split_folder('train')}"
        return scan_class_folders(split_dir, self.classes, key, hint=hint, scan=scan)

    def build_split(self, split: Split) -> Dataset:
        """The images of ``root/<split dir>`` (the test split defaults to the val one)."""
        if split == "test" and self.split_dirs["test"] == self.split_dirs["val"]:
            val_dir = self.split_folder("val")
            rank_zero_info(f"{type(self).__name__}: test_dir is None, testing on {val_dir}")
            return self.base_dataset("val")
        return self.image_dataset(split)


__all__ = [
    "DecodedCacheMixin", "ImageFolderDataModule", "ImageListDataset",
    "require_dir", "scan_class_folders", "verify_images", "warn_skipped",
]  # fmt: skip
