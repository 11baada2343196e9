"""Helpers shared by the data tests: batch-contract checks for any MultiViewDataModule."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from ncl_lightning.data import MultiViewDataModule


def _check_batches(dm: MultiViewDataModule, n_views: int = 2) -> None:
    """Assert the train and val batch contracts of ``dm`` (already set up)."""
    size = (dm.in_channels, dm.image_size, dm.image_size)
    views, labels = next(iter(dm.train_dataloader()))
    assert isinstance(views, list) and len(views) == n_views
    for v in views:
        assert v.shape == (dm.batch_size, *size) and v.dtype == torch.float32
    assert labels.shape == (dm.batch_size,) and labels.dtype == torch.long
    assert labels.min() >= 0 and labels.max() < dm.num_classes
    assert not torch.equal(views[0], views[1]), "two views of the same images are identical"

    images, labels = next(iter(dm.val_dataloader()))
    assert images.shape[1:] == size and images.dtype == torch.float32
    assert labels.dtype == torch.long and labels.max() < dm.num_classes
    assert images.shape[0] == min(dm.batch_size, len(dm.val_dataset))


@pytest.fixture
def check_batches() -> Callable[..., None]:
    """``check_batches(dm, n_views=2)``: shapes, dtypes and label ranges of the loaders."""
    return _check_batches
