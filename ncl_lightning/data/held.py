"""The uint8 training split held on the training device (``hold_on_device: true``).

Small image sets (CIFAR: 150 MB of uint8) fit on any accelerator: held there as one
tensor, the training loader yields only the drawn indices and labels, and the transfer
hook gathers the images on the device. The indices come from the same
[`EpochSampler`][ncl_lightning.data.seeding.EpochSampler] and the device views are seeded
per batch as before: same batches and views as ``hold_on_device: false``, exact resume.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.utils.data import Dataset

from ncl_lightning.data.base import MultiViewDataModule
from ncl_lightning.data.memory import TensorImageDataset
from ncl_lightning.foundation.errors import ConfigError, DataError, UsageError

HELD_RULE = "images held on the device"


class HeldIndices(Dataset):
    """``(index, label)`` items of a split whose images are held elsewhere; a key is an
    index or an ``(index, sample_seed)`` pair (the device views are seeded per batch).
    Collated, a batch is ``(indices [B], labels [B])``, both int64.

    Args:
        labels: Integer tensor ``[N]``, the labels of the held images.
    """

    def __init__(self, labels: Tensor) -> None:
        self.labels = labels.long()

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, key: int | tuple[int, int]) -> tuple[int, int]:
        index = key[0] if isinstance(key, tuple) else key
        return index, int(self.labels[index])

    def __getitems__(self, keys: list[Any]) -> list[tuple[int, int]]:
        indices = [key[0] if isinstance(key, tuple) else key for key in keys]
        return list(zip(indices, self.labels[indices].tolist(), strict=True))


def held_split(dataset: Dataset, size: int, name: str) -> tuple[Tensor, Tensor]:
    """The uint8 images ``[N, C, size, size]`` and int64 labels ``[N]`` of the in-memory
    training split ``dataset`` (rows of skipped files left out), for holding on the device.

    Raises:
        DataError: The split is not a [`TensorImageDataset`][] of uint8 images of side
            ``size`` (the message names the DataModule ``name``).
    """
    images = getattr(dataset, "images", None)
    if (
        not isinstance(dataset, TensorImageDataset)
        or images.dtype != torch.uint8
        or tuple(images.shape[-2:]) != (size, size)
    ):
        raise DataError(
            f"data.init_args.hold_on_device: the training split of {name} is not one uint8 "
            f"tensor [N, C, {size}, {size}] in memory; set hold_on_device: false"
        )
    keep = getattr(dataset, "keep", None)  # DecodedImages: rows of unreadable files left out
    return (images, dataset.labels) if keep is None else (images[keep], dataset.labels[keep])


class HeldOnDeviceDataModule(MultiViewDataModule):
    """A [`MultiViewDataModule`][] whose uint8 training split can be held on the device.

    With ``hold_on_device: true`` the training loader yields ``(indices [B], labels [B])``
    from the usual sampler, in the main process by default (``num_workers: null`` gives
    0), and [`transferred_images`][] gathers ``images [B, C, S, S]`` from the split held
    on the batch's device (moved there once, at the first training batch) for the device
    views. Validation and test loaders are unchanged. Subclasses build their training split
    as a [`TensorImageDataset`][] of uint8 images of side ``source_size``.

    Args:
        hold_on_device: Hold the uint8 training split on the training device; needs
            ``augment_on: device``.
        **kwargs: The options of [`MultiViewDataModule`][].

    Raises:
        ConfigError: ``hold_on_device`` without ``augment_on: device``.
    """

    def __init__(self, hold_on_device: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if hold_on_device and self.augment_on != "device":
            raise ConfigError(
                "data.init_args.hold_on_device: true needs data.init_args.augment_on: device "
                f"(got {self.augment_on!r}): the views are made from the images held on the "
                "device; set augment_on: device, or hold_on_device: false",
                key="hold_on_device",
            )
        self.hold_on_device = hold_on_device
        self._held_host: Tensor | None = None  # the split's uint8 images, in host memory
        self._held: Tensor | None = None  # the same on the training device

    def setup(self, stage: str | None = None) -> None:
        """As [`MultiViewDataModule.setup`][]; with ``hold_on_device`` the training
        dataset yields ``(index, label)`` items ([`HeldIndices`][])."""
        super().setup(stage)
        if self.hold_on_device and self.train_dataset is not None and self._held_host is None:
            name = type(self).__name__
            images, labels = held_split(self.base_dataset("train"), self.source_size, name)
            self._held_host = images
            self.train_dataset = HeldIndices(labels)

    def teardown(self, stage: str | None = None) -> None:
        """Free the device copy of the held images (a later fit moves them again)."""
        self._held = None
        super().teardown(stage)

    def transferred_images(self, batch: Any) -> tuple[Tensor, Tensor]:
        """``(uint8 images [B, C, S, S], labels [B])`` of a transferred training batch;
        with ``hold_on_device`` gathered from the held split by the batch's
        ``indices [B]`` on their device."""
        if not self.hold_on_device:
            return super().transferred_images(batch)
        if self._held_host is None:
            raise UsageError("hold_on_device: no training split is held; call setup('fit') first")
        indices, labels = batch
        if self._held is None or self._held.device != indices.device:
            self._held = self._held_host.to(indices.device)  # once per fit
        return self._held.index_select(0, indices), labels

    def _auto_workers(self) -> tuple[int, str]:
        if self.hold_on_device:
            return 0, HELD_RULE  # the loader only collates indices
        return super()._auto_workers()

    def loader_summary(self) -> str:
        """[`MultiViewDataModule.loader_summary`][], and whether the training images are
        held on the device."""
        summary = super().loader_summary()
        return f"{summary}, {HELD_RULE}" if self.hold_on_device else summary


__all__ = ["HELD_RULE", "HeldIndices", "HeldOnDeviceDataModule", "held_split"]
