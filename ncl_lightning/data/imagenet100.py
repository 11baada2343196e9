"""ImageNet-100: the standard 100-class ImageNet subset (CMC; NCL and BayesNCL configs).

The 100 WNIDs ship with the package (``resources/imagenet100_classes.txt``), so a full
ImageNet tree (``root/train/<1000 wnids>``) works as is: only the 100 listed class
folders are scanned. A prepared 100-class folder works the same way.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

from lightning.pytorch.utilities import rank_zero_info
from torch.utils.data import Dataset

from ncl_lightning.data.base import MultiViewDataModule, Split
from ncl_lightning.data.device_decode import DecodeOn
from ncl_lightning.data.folder import DecodedCacheMixin, require_dir, scan_class_folders
from ncl_lightning.data.memory import CacheMode
from ncl_lightning.data.scan import FolderScan
from ncl_lightning.data.transforms import SimCLRAugmentation, imagenet_augmentation
from ncl_lightning.foundation.errors import DataError, DataNotFoundError

SHIPPED_CLASS_LIST = "ncl_lightning/data/resources/imagenet100_classes.txt"


def load_imagenet100_classes(class_list: str | None = None) -> list[str]:
    """Sorted WNIDs of ImageNet-100 (or of a user's class-list file).

    Args:
        class_list: Text file with one WNID per line (blank lines and ``#`` comments
            ignored); ``None`` reads the list shipped with the package.

    Returns:
        The WNIDs, sorted (this order is the label order).
    """
    if class_list is None:
        ref = resources.files("ncl_lightning.data").joinpath("resources", "imagenet100_classes.txt")
        text = ref.read_text(encoding="utf-8")
    else:
        path = Path(class_list).expanduser()
        if not path.is_file():
            raise DataNotFoundError(
                f"data.init_args.class_list: class_list file not found: {path}", key="class_list"
            )
        text = path.read_text(encoding="utf-8")
    wnids = [line.split("#")[0].strip() for line in text.splitlines()]
    wnids = [w for w in wnids if w]
    duplicates = sorted({w for w in wnids if wnids.count(w) > 1})
    if duplicates or not wnids:
        raise DataError(
            f"data.init_args.class_list: {class_list or SHIPPED_CLASS_LIST} is empty or "
            f"repeats classes: {duplicates}",
            key="class_list",
        )
    return sorted(wnids)


def class_list_hint(class_list: str | None, count: int) -> str:
    """The missing-class error's pointer to where the ``count`` classes are listed, and to
    the options for other classes or another folder (the docs page "Your own data")."""
    if class_list is not None:
        return f"; the {count} classes are listed in {class_list} (data.init_args.class_list)"
    return (
        f"; the {count} classes are listed in {SHIPPED_CLASS_LIST}: for other classes give "
        "--data.init_args.class_list <file of WNIDs>, for any labelled or unlabelled folder "
        "--data ncl_lightning.data.ImageFolderDataModule (docs: 'Your own data')"
    )


class ImageNet100DataModule(DecodedCacheMixin, MultiViewDataModule):
    """ImageNet-100 at 224 px with the SimCLR ImageNet augmentation.

    Labels are the positions of the WNIDs in sorted order. ImageNet has no labelled
    test split, so the test split is the validation folder (logged at ``setup``). The
    validation folder must be sorted into ``<wnid>/`` sub-folders, like the training one.
    Evaluation: resize the shorter side to 256, center-crop 224. ``cache``,
    ``skip_corrupt`` and ``decode_on`` work as in
    [`ImageFolderDataModule`][ncl_lightning.data.ImageFolderDataModule].

    Args:
        root: ImageNet root holding ``train_dir`` and ``val_dir`` (1000 or 100 classes).
        class_list: File of WNIDs to use instead of the shipped ImageNet-100 list.
        train_dir: Training folder, relative to ``root``.
        val_dir: Validation folder, relative to ``root``.
        cache: Decoded-once cache, ``none``, ``memory`` or ``disk``, stored at 256 px.
        cache_dir: Folder of the ``disk`` cache.
        skip_corrupt: Leave out the images that cannot be decoded (with ``cache: none``,
            ``setup`` decodes every image once more: minutes for the 126k training images).
        decode_on: ``cpu`` or ``device`` (nvJPEG; needs ``augment_on: device``).
        **kwargs: Loader and view options of [`MultiViewDataModule`][] (``batch_size``,
            ``num_workers``, ``n_views``, ``augmentation``, ``augment_on``, ...).

    Raises:
        DataNotFoundError: At ``check_inputs`` (called by ``setup``), naming the
            missing root or split folder, the missing WNID folders (all counted), or an
            empty WNID folder.
        DataError: At ``check_inputs`` when the training split is smaller than one
            batch.
        CorruptImageError: When an image cannot be decoded and ``skip_corrupt`` is false.
    """

    eval_resize = 256

    def __init__(
        self,
        root: str,
        class_list: str | None = None,
        train_dir: str = "train",
        val_dir: str = "val",
        cache: CacheMode = "none",
        cache_dir: str | None = None,
        skip_corrupt: bool = False,
        decode_on: DecodeOn = "cpu",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.use_cache(cache, cache_dir, skip_corrupt)
        self.use_decode(decode_on)
        self.root = Path(root).expanduser()
        self.split_dirs: dict[Split, str] = {"train": train_dir, "val": val_dir}
        self.class_list = class_list
        self.classes = load_imagenet100_classes(class_list)
        self.num_classes = len(self.classes)
        self.in_channels = 3
        self.image_size = 224

    def default_augmentation(self) -> SimCLRAugmentation:
        """``imagenet_augmentation()``: crop 224, blur p=0.5."""
        return imagenet_augmentation()

    def split_folder(self, split: Split) -> Path:
        """``root/<split dir>``; the test split is the val folder."""
        return self.root / self.split_dirs["val" if split == "test" else split]

    def scan_split(self, split: Split) -> list[tuple[str, int]]:
        """The images of the listed WNID folders of the split folder (no other folder)."""
        name: Split = "val" if split == "test" else split
        key = f"data.init_args.{name}_dir"
        require_dir(
            self.root, "ImageNet", "data.init_args.root", f"{self.split_dirs[name]}/<wnid>/<image>"
        )
        split_dir = require_dir(
            self.split_folder(split), f"ImageNet-100 {name}", key, "<wnid>/<image>"
        )
        hint = class_list_hint(self.class_list, len(self.classes))
        folders = [self.root / d for d in self.split_dirs.values()]
        scan = FolderScan([self.root, *folders])
        return scan_class_folders(split_dir, self.classes, key, "ImageNet-100", hint, scan)

    def build_split(self, split: Split) -> Dataset:
        """Scan the listed WNID folders of ``root/<split dir>`` (test: the val folder)."""
        if split == "test":
            rank_zero_info(f"ImageNet100DataModule: testing on {self.split_folder('val')}")
            return self.base_dataset("val")
        return self.image_dataset(split)
