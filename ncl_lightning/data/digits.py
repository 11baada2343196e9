"""scikit-learn's bundled handwritten digits: 1,797 images, 8x8, one channel, 10 classes.

Real data with no download, small enough for CPU smoke runs and tests. The images are
held in memory as one uint8 tensor (pixel values 0..16 scaled to 0..255 and rounded), the
form both the CPU and the device augmentation take.
"""

from __future__ import annotations

from typing import Any

import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch.utils.data import Dataset

from ncl_lightning.data.base import Split
from ncl_lightning.data.held import HeldOnDeviceDataModule
from ncl_lightning.data.memory import TensorImageDataset
from ncl_lightning.data.transforms import SimCLRAugmentation, digits_augmentation
from ncl_lightning.foundation.validation import check_range


class DigitsDataModule(HeldOnDeviceDataModule):
    """sklearn ``load_digits`` with a stratified, seeded train/validation split.

    Pixel values 0..16 are scaled to [0, 1] and then normalised by the augmentation's
    mean/std. The validation split doubles as the test split (the data set has no
    separate test set).

    Args:
        val_fraction: Fraction of each class held out for validation/test, in (0, 1).
        seed: Seed of the split (the same seed always gives the same split).
        batch_size: Images per batch (128: the training split has 1,437 images).
        num_workers: DataLoader workers (0: the data is a small in-memory tensor).
        hold_on_device: Hold the uint8 training split on the training device and gather
            each batch there from its indices ([`HeldOnDeviceDataModule`][]); needs
            ``augment_on: device``.
        **kwargs: Loader and view options of [`MultiViewDataModule`][] (``batch_size``,
            ``num_workers``, ``n_views``, ``augmentation``, ``pin_memory``, ...).
    """

    def __init__(
        self,
        val_fraction: float = 0.2,
        seed: int = 0,
        batch_size: int = 128,
        num_workers: int = 0,
        hold_on_device: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            batch_size=batch_size,
            num_workers=num_workers,
            hold_on_device=hold_on_device,
            **kwargs,
        )
        check_range("val_fraction", val_fraction, 0, 1, "()")
        self.val_fraction = val_fraction
        self.seed = seed
        self.num_classes = 10
        self.in_channels = 1
        self.image_size = 8
        self._splits: dict[Split, TensorImageDataset] | None = None

    def default_augmentation(self) -> SimCLRAugmentation:
        """``digits_augmentation()``: mild crops and rotations, no flips."""
        return digits_augmentation()

    def _load(self) -> dict[Split, TensorImageDataset]:
        digits = load_digits()
        pixels = torch.as_tensor(digits.images, dtype=torch.float32).unsqueeze(1)
        images = (pixels * (255.0 / 16.0)).round().to(torch.uint8)  # 0..16 -> 0..255
        labels = torch.as_tensor(digits.target, dtype=torch.long)
        train_idx, val_idx = train_test_split(
            torch.arange(len(labels)).numpy(),
            test_size=self.val_fraction,
            stratify=labels.numpy(),
            random_state=self.seed,
        )
        train_idx, val_idx = torch.as_tensor(train_idx), torch.as_tensor(val_idx)
        val = TensorImageDataset(images[val_idx], labels[val_idx])
        return {"train": TensorImageDataset(images[train_idx], labels[train_idx]), "val": val}

    def build_split(self, split: Split) -> Dataset:
        """The in-memory train split, or the validation split for ``val`` and ``test``."""
        if self._splits is None:
            self._splits = self._load()
        return self._splits["train" if split == "train" else "val"]
