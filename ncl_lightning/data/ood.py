"""Out-of-distribution test sets for ImageNet-100 models: Stylized, Sketch, ImageNet-C.

``ImageNetOODDataModule`` is test-only: ``ncl-cli test`` with a classifier trained on
ImageNet-100 evaluates it on every configured set, one test DataLoader per set. Each set
is restricted to the ImageNet-100 WNIDs and labelled like ``ImageNet100DataModule``
(position of the WNID in the sorted class list); class folders of other WNIDs are never
scanned.

Layouts (each ``<wnid>`` folder holds the images, possibly in sub-folders):
    * Stylized-ImageNet (its val folder): ``<stylized_root>/<wnid>/``
    * ImageNet-Sketch (the ``sketch/`` folder of the release): ``<sketch_root>/<wnid>/``
    * ImageNet-C: ``<imagenet_c_root>/<corruption>/<severity 1..5>/<wnid>/``
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from torch.utils.data import DataLoader, Dataset

from ncl_lightning.data.base import MultiViewDataModule, Split
from ncl_lightning.data.folder import (
    ImageListDataset,
    require_dir,
    scan_class_folders,
    verify_images,
    warn_skipped,
)
from ncl_lightning.data.imagenet100 import class_list_hint, load_imagenet100_classes
from ncl_lightning.data.scan import FolderScan
from ncl_lightning.data.seeding import TransformedDataset
from ncl_lightning.data.transforms import SimCLRAugmentation, imagenet_augmentation
from ncl_lightning.foundation.errors import ConfigError, UsageError

IMAGENET_C_CORRUPTIONS: tuple[str, ...] = (
    "gaussian_noise",
    "shot_noise",
    "impulse_noise",
    "defocus_blur",
    "glass_blur",
    "motion_blur",
    "zoom_blur",
    "snow",
    "frost",
    "fog",
    "brightness",
    "contrast",
    "elastic_transform",
    "pixelate",
    "jpeg_compression",
)
"""The 15 benchmark corruptions of ImageNet-C (Hendrycks & Dietterich, 2019), the default."""

IMAGENET_C_EXTRA_CORRUPTIONS: tuple[str, ...] = (
    "speckle_noise",
    "gaussian_blur",
    "spatter",
    "saturate",
)
"""The 4 held-out ("extra") corruptions of the ImageNet-C release; selectable by name."""

IMAGENET_C_SEVERITIES: tuple[int, ...] = (1, 2, 3, 4, 5)


def _distinct_among(key: str, values: Sequence[Any], valid: Sequence[Any], what: str) -> list:
    """``values`` as a list; ``ConfigError`` unless they are distinct, non-empty, in ``valid``."""
    if not values or any(v not in valid for v in values) or len(set(values)) != len(values):
        raise ConfigError(
            f"data.init_args.{key}: {key} must be distinct {what} among {list(valid)}, "
            f"got {list(values)}",
            key=key,
        )
    return list(values)


class ImageNetOODDataModule(MultiViewDataModule):
    """Test-only OOD evaluation of ImageNet-100 models on Stylized, Sketch and ImageNet-C.

    ``test_dataloader()`` returns one DataLoader per set, in the order of ``test_names``:
    ``"stylized"``, ``"sketch"``, then ``"imagenet_c/<corruption>/<severity>"`` for each
    corruption in the given order and each severity ascending (sets whose root is
    ``None`` are left out). Batches are ``(images [B, 3, 224, 224], labels [B])``.

    Evaluation transform (ImageNet normalisation): Stylized and Sketch images come in
    varied sizes, so the shorter side is resized to 256 and the center 224 cropped.
    ImageNet-C images already are 224 x 224 center crops of the ImageNet validation
    images; they go through ``clean(resize=224)``, which leaves a 224 x 224 image
    unchanged (and makes any other size 224 x 224 rather than failing at collation).

    Args:
        stylized_root: Stylized-ImageNet val folder, ``<root>/<wnid>/<images>``.
        sketch_root: ImageNet-Sketch ``sketch/`` folder, ``<root>/<wnid>/<images>``.
        imagenet_c_root: ImageNet-C, ``<root>/<corruption>/<severity>/<wnid>/<images>``.
        class_list: File of WNIDs to use instead of the shipped ImageNet-100 list.
        corruptions: ImageNet-C corruptions to evaluate, in this order; ``None`` is the
            15 benchmark corruptions (the 4 extra ones may be named explicitly).
        severities: ImageNet-C severities to evaluate, among 1..5.
        skip_corrupt: Leave out the images that cannot be decoded (one warning per set
            naming them; listed in ``skipped_images``) instead of failing with
            [`CorruptImageError`][ncl_lightning.foundation.errors.CorruptImageError]. Cost:
            ``setup`` decodes every image once more (a thread pool).
        num_workers: DataLoader worker processes.
        **kwargs: Loader options of [`MultiViewDataModule`][] (``batch_size``,
            ``augmentation``, ``pin_memory``, ...).

    Attributes:
        test_names: Name of each test set, aligned with ``test_dataloader()``.
        classes: WNIDs in label order.
        skipped_images: ``set name -> [(path, reason), ...]`` with ``skip_corrupt``.

    Raises:
        ConfigError: At construction if no root is given, or for an unknown or repeated
            corruption or severity; at [`check_inputs`][] and ``setup`` for the ``fit``
            and ``validate`` stages.
        DataNotFoundError: At [`check_inputs`][] (called by ``setup``), naming a
            missing root, corruption or severity folder, or missing/empty WNID folders.
        CorruptImageError: When an image cannot be decoded and ``skip_corrupt`` is false.
    """

    eval_resize = 256

    def __init__(
        self,
        stylized_root: str | None = None,
        sketch_root: str | None = None,
        imagenet_c_root: str | None = None,
        class_list: str | None = None,
        corruptions: list[str] | None = None,
        severities: list[int] | None = None,
        skip_corrupt: bool = False,
        num_workers: int = 8,
        **kwargs: Any,
    ) -> None:
        super().__init__(num_workers=num_workers, **kwargs)
        if stylized_root is None and sketch_root is None and imagenet_c_root is None:
            raise ConfigError(
                "data.init_args: ImageNetOODDataModule needs at least one of stylized_root, "
                "sketch_root, imagenet_c_root"
            )
        self.corruptions = _distinct_among(
            "corruptions",
            IMAGENET_C_CORRUPTIONS if corruptions is None else corruptions,
            IMAGENET_C_CORRUPTIONS + IMAGENET_C_EXTRA_CORRUPTIONS,
            "names",
        )
        self.severities = sorted(
            _distinct_among(
                "severities",
                IMAGENET_C_SEVERITIES if severities is None else severities,
                IMAGENET_C_SEVERITIES,
                "values",
            )
        )
        self.class_list = class_list
        self.classes = load_imagenet100_classes(class_list)
        self.num_classes = len(self.classes)
        self.in_channels = 3
        self.image_size = 224
        self.skip_corrupt = skip_corrupt
        self.skipped_images: dict[str, list[tuple[str, str]]] = {}
        # name -> (folder holding the <wnid> folders, what to call it, resize)
        self._sets: dict[str, tuple[Path, str, int]] = {}
        stylized, sketch, corrupted = (
            None if r is None else Path(r).expanduser()
            for r in (stylized_root, sketch_root, imagenet_c_root)
        )
        self._roots = [r for r in (stylized, sketch, corrupted) if r is not None]  # no link in
        if stylized is not None:
            self._sets["stylized"] = (stylized, "Stylized-ImageNet", self.eval_resize)
        if sketch is not None:
            self._sets["sketch"] = (sketch, "ImageNet-Sketch", self.eval_resize)
        if corrupted is not None:
            for c in self.corruptions:
                for s in self.severities:
                    what = f"ImageNet-C {c} severity {s}"
                    self._sets[f"imagenet_c/{c}/{s}"] = (
                        corrupted / c / str(s),
                        what,
                        self.image_size,
                    )
        self.test_names: list[str] = list(self._sets)
        self.test_datasets: list[Dataset] | None = None
        self._scans: dict[str, list[tuple[str, int]]] = {}

    def default_augmentation(self) -> SimCLRAugmentation:
        """``imagenet_augmentation()``: only its normalisation and crop size are used."""
        return imagenet_augmentation()

    def build_split(self, split: Split) -> Dataset:
        """Not available: the sets are built by ``setup`` into ``test_datasets``."""
        raise _test_only(split)

    def scan_set(self, name: str) -> list[tuple[str, int]]:
        """``(path, label)`` of the set ``name`` (cached; no image opened)."""
        if name in self._scans:
            return self._scans[name]
        folder, what, _ = self._sets[name]
        if name.startswith("imagenet_c/"):  # name the first missing level
            key = "data.init_args.imagenet_c_root"
            corruption, severity = folder.parent.name, folder.name
            require_dir(folder.parents[1], "ImageNet-C", key, "<corruption>/<severity>/<wnid>")
            require_dir(
                folder.parent,
                f"ImageNet-C {corruption}",
                key,
                f"<severity>/<wnid>; or leave {corruption} out of data.init_args.corruptions",
            )
            require_dir(
                folder,
                what,
                key,
                f"<wnid>/<image>; or leave {severity} out of data.init_args.severities",
            )
        else:
            key = f"data.init_args.{name}_root"
            require_dir(folder, what, key, "<wnid>/<image>")
        hint = class_list_hint(self.class_list, len(self.classes))
        scan = FolderScan(self._roots)
        self._scans[name] = scan_class_folders(folder, self.classes, key, what, hint, scan)
        return self._scans[name]

    def build_set(self, name: str) -> Dataset:
        """The untransformed ``(PIL image, label)`` dataset of the set ``name``; with
        ``skip_corrupt``, without the unreadable images (one warning)."""
        samples = self.scan_set(name)
        if self.skip_corrupt:
            kept, skipped = verify_images(samples)
            self.skipped_images[name] = skipped
            warn_skipped(skipped, len(samples), self._sets[name][0])
            samples = kept
        return ImageListDataset(samples, self.classes)

    def check_inputs(self, stage: str | None = None, world_size: int = 1) -> None:
        """Check that the stage is ``test``/``predict``/``None`` and scan every set's
        folders (read-only, cached for ``setup``).

        Raises:
            ConfigError: For the ``fit`` and ``validate`` stages (test-only).
            DataNotFoundError: A root, corruption, severity or WNID folder is missing, or
                a WNID folder holds no image.
        """
        if stage in ("fit", "validate"):
            raise _test_only(stage)
        self._check_augmentation()
        for name in self._sets:
            self.scan_set(name)

    def setup(self, stage: str | None = None) -> None:
        """Build every test set (stages ``test``, ``predict`` or ``None``)."""
        self.check_inputs(stage)
        if self.test_datasets is not None:
            return
        datasets = []
        for name, (_, _, resize) in self._sets.items():
            clean = self.augmentation.clean(resize=resize)
            datasets.append(TransformedDataset(self.build_set(name), clean))
        self.test_datasets = datasets

    def test_dataloader(self) -> list[DataLoader]:  # type: ignore[override]
        """One loader of ``(images [B, 3, 224, 224], labels [B])`` per set, in order."""
        if self.test_datasets is None:
            raise UsageError("OOD test datasets are not built; call setup('test') first")
        return [
            self._loader(ds, name, train=False)
            for ds, name in zip(self.test_datasets, self.test_names, strict=True)
        ]

    def predict_dataloader(self) -> list[DataLoader]:  # type: ignore[override]
        """Same as ``test_dataloader``."""
        return self.test_dataloader()

    def train_dataloader(self) -> DataLoader:
        raise _test_only("fit")

    def val_dataloader(self) -> DataLoader:
        raise _test_only("validate")


def _test_only(stage: str | None) -> ConfigError:
    return ConfigError(
        f"data: ImageNetOODDataModule is test-only (stage {stage!r} is not supported); "
        "evaluate a trained classifier with `ncl-cli test`"
    )


__all__ = [
    "IMAGENET_C_CORRUPTIONS",
    "IMAGENET_C_EXTRA_CORRUPTIONS",
    "IMAGENET_C_SEVERITIES",
    "ImageNetOODDataModule",
]
