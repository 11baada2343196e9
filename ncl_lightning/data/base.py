"""The base LightningDataModule: multi-view training batches, clean evaluation batches.

A concrete DataModule says how to build its untransformed splits (``build_split``) and
which augmentation suits it (``default_augmentation``); this base adds the views, the
clean transform and the loaders, and knows nothing about the method consuming them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, get_args

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset, Subset

from ncl_lightning.data.batch_scope import BatchScope, check_train_batches, per_device_batch
from ncl_lightning.data.loader_defaults import (
    AugmentOn,
    auto_workers,
    describe_loader,
    loader_options,
)
from ncl_lightning.data.memory import FixedSizeUInt8
from ncl_lightning.data.seeding import (
    EvalViewSampler,
    ResumableData,
    ResumableLoader,
    SeededTransformDataset,
    TransformedDataset,
    global_seed,
)
from ncl_lightning.data.transforms import SimCLRAugmentation
from ncl_lightning.data.views import DeviceViews, cpu_views
from ncl_lightning.foundation.errors import ConfigError, DataError, UsageError
from ncl_lightning.foundation.validation import check_choice, check_int

Split = Literal["train", "val", "test"]
TrainTransform = Literal["simclr", "crop_flip", "none"]

# Which base datasets each Lightning stage needs (None: all of them).
_STAGE_SPLITS: dict[str | None, tuple[Split, ...]] = {
    "fit": ("train", "val"),
    "validate": ("val",),
    "test": ("test",),
    "predict": ("test",),
    None: ("train", "val", "test"),
}


class MultiViewDataModule(ResumableData, L.LightningDataModule):
    """Base of every DataModule: multi-view training data, clean evaluation data.

    Subclasses set ``num_classes``, ``in_channels`` and ``image_size`` in ``__init__``
    without touching the data (the CLI links them into the model at instantiation),
    and implement ``build_split`` and ``default_augmentation``. ``eval_resize`` (class
    attribute or instance attribute) is passed to ``SimCLRAugmentation.clean``.

    Args:
        batch_size: Images per batch: per device, or summed over every device and node
            with ``batch_scope: global``.
        batch_scope: What ``batch_size`` counts. ``device``: each process loads
            ``batch_size`` (the global batch grows with the device count). ``global``: the
            run's batch over all ``world_size`` processes, each loading
            ``batch_size // world_size`` (``per_device_batch_size``), so a paper's
            global batch and its scaled learning rate hold on any device count; a
            ``world_size`` that does not divide it is refused before training.
        num_workers: DataLoader worker processes (0 loads in the main process); ``None``
            picks them from the CPUs available to each device process
            (``default_workers``: 15 with 16 CPUs
            and one GPU; at most 2 with ``augment_on: device`` when no image file is
            decoded per item).
        n_views: Augmented views per training image (>= 2 for contrastive learning,
            1 for supervised training).
        augmentation: View augmentation; ``None`` uses the subclass's preset.
        train_transform: Training transform: ``simclr`` (the full ``augmentation``),
            ``crop_flip`` (its crop, rotation and flip only: probes, fine-tuning,
            supervised training) or ``none`` (the clean evaluation transform).
        augment_on: Where the training views are made: ``cpu`` (torchvision, per image,
            in the loader workers) or ``device`` (batched tensor ops on the training
            device after the uint8 batch is transferred: the GPU when training on one).
        pin_memory: Pin host memory; only effective when CUDA is available.
        persistent_workers: Keep workers alive between epochs (``num_workers > 0`` only).
        prefetch_factor: Batches each worker loads ahead; ``None`` keeps torch's default
            (2); only when ``num_workers > 0`` (ignored otherwise).
        drop_last: Drop the last incomplete training batch.

    Attributes:
        num_classes: Number of classes of the labels.
        in_channels: Image channels ``C``.
        image_size: Side ``H = W`` of the batched images.
    """

    num_classes: int
    in_channels: int
    image_size: int
    eval_resize: int | None = None

    def __init__(
        self,
        batch_size: int = 256,
        batch_scope: BatchScope = "device",
        num_workers: int | None = None,
        n_views: int = 2,
        augmentation: SimCLRAugmentation | None = None,
        train_transform: TrainTransform = "simclr",
        augment_on: AugmentOn = "cpu",
        pin_memory: bool = True,
        persistent_workers: bool = True,
        prefetch_factor: int | None = None,
        drop_last: bool = True,
    ) -> None:
        super().__init__()
        check_int("batch_size", batch_size)
        per_device_batch(batch_size, batch_scope, 1)  # checks the choice
        if num_workers is not None:
            check_int("num_workers", num_workers, 0)
        if prefetch_factor is not None:
            check_int("prefetch_factor", prefetch_factor)
        check_int("n_views", n_views)
        check_choice("train_transform", train_transform, get_args(TrainTransform))
        check_choice("augment_on", augment_on, get_args(AugmentOn))
        self.save_hyperparameters()
        self.batch_size = batch_size
        self.batch_scope: BatchScope = batch_scope
        self._num_workers = num_workers
        self.n_views = n_views
        self.train_transform = train_transform
        self.augment_on = augment_on
        self.device_views: DeviceViews | None = None
        self.pin_memory = pin_memory
        self.persistent_workers = persistent_workers
        self.prefetch_factor = prefetch_factor
        self.drop_last = drop_last
        self._augmentation = augmentation
        self._base: dict[Split, Dataset] = {}
        self.seed: int | None = None  # the training data's seed, kept in checkpoints
        self.resumed = (0, 0)  # (epoch, batches done) of the checkpoint resumed from
        self.train_dataset: Dataset | None = None
        self.val_dataset: Dataset | None = None
        self.test_dataset: Dataset | None = None

    # ----------------------------------------------------------------- subclass hooks
    def build_split(self, split: Split) -> Dataset:
        """Build the untransformed dataset of ``split``: items ``(image, label)``.

        ``image`` is a PIL image or an image tensor ``[C, H, W]``; ``label`` an int in
        ``[0, num_classes)``. Raise a clear error when the data is missing.
        """
        raise NotImplementedError(f"{type(self).__name__} must implement build_split")

    def default_augmentation(self) -> SimCLRAugmentation:
        """The augmentation used when none is configured."""
        raise NotImplementedError(f"{type(self).__name__} must implement default_augmentation")

    def split_size(self, split: Split) -> int:
        """Number of samples of ``split``, for [`check_inputs`][]: by building it (cached);
        DataModules whose building is expensive override it with a count."""
        return len(self.base_dataset(split))  # type: ignore[arg-type]

    def check_inputs(self, stage: str | None = None, world_size: int = 1) -> None:
        """Check, before any training, that ``stage`` can get the data it needs.

        Read-only (nothing written or downloaded, folders listed, not decoded); the CLI
        calls it before ``trainer.fit``/``test`` and ``setup`` calls it first. Subclasses
        extend it (missing folders or files) and call ``super()``.

        Args:
            stage: ``fit``, ``validate``, ``test``, ``predict`` or ``None`` (all splits).
            world_size: Processes sharing the training split (``trainer.world_size``).

        Raises:
            DataNotFoundError: A data folder or file is missing (message names the config
                key and the path).
            DataError: The training split has fewer samples per device than one batch
                with ``drop_last``, or an evaluation split is empty.
            ConfigError: The augmentation does not fit the images, or ``batch_scope:
                global`` with a ``batch_size`` that ``world_size`` does not divide.
        """
        splits = _STAGE_SPLITS.get(stage, _STAGE_SPLITS[None])
        per_device_batch(self.batch_size, self.batch_scope, world_size)
        self._check_augmentation()
        if "train" in splits:
            self._check_train_size(self.split_size("train"), world_size)
        for split in splits:
            if split != "train" and self.split_size(split) == 0:
                raise DataError(f"data: the {split} split of {type(self).__name__} is empty")

    # ---------------------------------------------------------------------- workers
    @property
    def num_workers(self) -> int:
        """The configured ``num_workers``, or ``default_workers`` of this pipeline."""
        return self._auto_workers()[0] if self._num_workers is None else self._num_workers

    @property
    def reads_files(self) -> bool:
        """Whether workers decode an image file per item (then as many as ``cpu`` get)."""
        return False

    def _auto_workers(self) -> tuple[int, str]:
        devices = getattr(self.trainer, "num_devices", None)  # (None before a trainer)
        return auto_workers(self.augment_on, devices, self.reads_files)

    def _loader_options(self, persistent: bool) -> dict[str, Any]:
        return loader_options(self.num_workers, self.pin_memory, persistent, self.prefetch_factor)

    def loader_summary(self) -> str:
        """The training loader's settings for the batch line of ``fit``."""
        rule = "configured" if self._num_workers is not None else self._auto_workers()[1]
        return describe_loader(
            self.num_workers,
            rule,
            pinned=self.pin_memory and torch.cuda.is_available(),
            persistent=self.persistent_workers,
            prefetch_factor=self.prefetch_factor,
        )

    # ---------------------------------------------------------------------- datasets
    @property
    def augmentation(self) -> SimCLRAugmentation:
        """The configured augmentation, or the subclass preset."""
        if self._augmentation is None:
            self._augmentation = self.default_augmentation()
        return self._augmentation

    @property
    def source_size(self) -> int:
        """Side of the uint8 images the device views crop from: ``eval_resize`` or
        ``image_size``."""
        return self.eval_resize or self.image_size

    def preprocessing(self) -> dict[str, Any]:
        """The evaluation transform's facts, which a checkpoint records for its export
        (``config.json``; timm's ``pretrained_cfg``): ``input_size`` ``[C, H, W]``,
        ``resize`` (the shorter side before the centre crop; ``None``: images used at
        their size), ``interpolation`` and the normalisation ``mean``, ``std``."""
        aug = self.augmentation
        return {
            "input_size": [aug.channels, aug.crop_size, aug.crop_size],
            "resize": self.eval_resize,
            "crop_mode": "center",
            "interpolation": "bilinear",  # torchvision's Resize default, as clean() uses
            "mean": [float(m) for m in aug.mean],
            "std": [float(s) for s in aug.std],
        }

    def base_dataset(self, split: Split) -> Dataset:
        """The untransformed dataset of ``split``, built once and cached."""
        if split not in self._base:
            self._base[split] = self.build_split(split)
        return self._base[split]

    def setup(self, stage: str | None = None) -> None:
        """Build the datasets ``stage`` needs (``fit``, ``validate``, ``test``, ``predict``)."""
        splits = _STAGE_SPLITS.get(stage, _STAGE_SPLITS[None])
        world = self.trainer.world_size if self.trainer is not None else 1
        self.check_inputs(stage, world)
        clean = self.augmentation.clean(resize=self.eval_resize)
        if "train" in splits and self.train_dataset is None:
            if self.seed is None:
                self.seed = global_seed()
            if self.augment_on == "device":
                uint8 = FixedSizeUInt8(self.source_size)
                self.train_dataset = TransformedDataset(self.base_dataset("train"), uint8)
                self.device_views = DeviceViews(self)
            else:
                views = cpu_views(self._train_view_transform(), self.n_views)
                self.train_dataset = SeededTransformDataset(self.base_dataset("train"), views)
            self._check_train_size(len(self.train_dataset), world)  # after skipped files
        if "val" in splits and self.val_dataset is None:
            self.val_dataset = TransformedDataset(self.base_dataset("val"), clean)
        if "test" in splits and self.test_dataset is None:
            self.test_dataset = TransformedDataset(self.base_dataset("test"), clean)

    def capture_views(self, mode: str | None) -> None:
        """Compile the device views' tensor part (``augment_on: device``; else a no-op)."""
        if self.device_views is not None:
            self.device_views.capture(mode)

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """With ``augment_on: device``, turn a transferred training batch ``(uint8 images
        [B, C, S, S], labels)`` into ``(views, labels)`` on its device."""
        trainer = self.trainer
        if self.device_views is None or trainer is None or not trainer.training:
            return batch
        images, labels = self.transferred_images(batch)
        views = self.device_views(images, seed=self._batch_seed())
        plugin = getattr(trainer, "precision_plugin", None)  # 16-true, 64-true: as CPU batches
        return (views if plugin is None else plugin.convert_input(views)), labels

    def transferred_images(self, batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """``(uint8 images [B, C, S, S], labels [B])`` of a transferred training batch
        (``augment_on: device``), for the device views."""
        images, labels = batch
        return images, labels

    def _train_view_transform(self) -> Callable[[Any], Any]:
        if self.train_transform == "crop_flip":
            return self.augmentation.crop_flip().build()
        if self.train_transform == "none":
            return self.augmentation.clean(resize=self.eval_resize)
        return self.augmentation.build()

    def _check_augmentation(self) -> None:
        # Unset augmentation fields get CIFAR defaults: fail here, not deep in a transform.
        aug, name = self.augmentation, type(self).__name__
        if aug.channels != self.in_channels:
            raise ConfigError(
                f"augmentation mean/std have {aug.channels} channel(s) but {name} images "
                f"have in_channels={self.in_channels}; set augmentation.mean and std",
                key="augmentation",
            )
        if aug.crop_size != self.image_size:
            raise ConfigError(
                f"augmentation.crop_size={aug.crop_size} differs from {name} "
                f"image_size={self.image_size}",
                key="augmentation",
            )

    def _check_train_size(self, count: int, world_size: int = 1) -> None:
        check_train_batches(
            count, world_size, self.batch_size, self.drop_last, batch_scope=self.batch_scope
        )

    # ----------------------------------------------------------------------- loaders
    def _loader(self, dataset: Dataset | None, name: str, train: bool) -> DataLoader:
        if dataset is None:
            raise UsageError(f"{name} dataset is not built; call setup() first")
        # (index, seed) keys from (seed, epoch): exact resume, any worker count
        sampler = self.train_sampler(dataset) if train else None
        return (ResumableLoader if train else DataLoader)(
            dataset,
            batch_size=self.per_device_batch_size,
            sampler=sampler,
            generator=torch.Generator().manual_seed(self.seed or 0),  # private: global untouched
            drop_last=train and self.drop_last,
            **self._loader_options(self.persistent_workers),
        )

    def train_dataloader(self) -> DataLoader:
        """Shuffled ``(views, labels)``: ``n_views`` tensors ``[B, C, H, W]``, ``[B]``."""
        return self._loader(self.train_dataset, "train", train=True)

    def val_dataloader(self) -> DataLoader:
        """Clean ``(images [B, C, H, W], labels [B])`` of the validation split, in order."""
        return self._loader(self.val_dataset, "val", train=False)

    def test_dataloader(self) -> DataLoader:
        """Clean ``(images [B, C, H, W], labels [B])`` of the test split, in order."""
        return self._loader(self.test_dataset, "test", train=False)

    def predict_dataloader(self) -> DataLoader:
        """Same as ``test_dataloader``."""
        return self._loader(self.test_dataset, "test", train=False)

    def clean_dataloader(self, split: Split, rank: int = 0, world_size: int = 1) -> DataLoader:
        """Clean ``(images [B, C, H, W], labels [B])`` of ``split`` in order, no batch
        dropped, without ``setup``; rank ``rank`` of ``world_size`` gets ``rank::world_size``."""
        clean = self.augmentation.clean(resize=self.eval_resize)
        base = self.base_dataset(split)
        if world_size > 1:
            base = Subset(base, range(rank, len(base), world_size))  # type: ignore[arg-type]
        return self._loader(TransformedDataset(base, clean), split, False)

    def clean_train_dataloader(self, rank: int = 0, world_size: int = 1) -> DataLoader:
        """[`clean_dataloader`][] of the training split."""
        return self.clean_dataloader("train", rank, world_size)

    def view_dataloader(self, split: Split, rank: int = 0, world_size: int = 1) -> DataLoader:
        """Augmented ``(views, labels)`` of an evaluation split in batches that mix the
        classes (SEPIN's pairs and in-batch negatives), in the order and with the views of
        [`EvalViewSampler`][] (batches of the configured ``batch_size``: the whole global
        batch with ``batch_scope: global``).

        Args:
            split: ``"val"`` or ``"test"``.
            rank: This process' rank.
            world_size: Number of ranks sharing the split.
        """
        check_choice("split", split, ("val", "test"))
        views = cpu_views(self.augmentation.build(), self.n_views)
        base = self.base_dataset(split)
        size = len(base)  # type: ignore[arg-type]
        keys = EvalViewSampler(size, self.seed, rank, world_size, self.batch_size)
        return DataLoader(
            SeededTransformDataset(base, views),
            batch_size=self.batch_size,
            sampler=keys,
            generator=torch.Generator().manual_seed(keys.seed),  # private: global untouched
            **self._loader_options(persistent=False),
        )
