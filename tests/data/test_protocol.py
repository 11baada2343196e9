"""The DataModule extras are written protocols: each DataModule has the ones it claims,
and a callback that needs a missing one says which, in one line."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from ncl_lightning.callbacks import FeatureStatistics
from ncl_lightning.callbacks.top_activations import _picture_data
from ncl_lightning.data import DigitsDataModule, DSpritesDataModule, SparseCodingDataModule
from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.foundation.protocols import (
    ChecksInputs,
    ClassLabels,
    CleanData,
    FactorData,
    GroundTruthDictionary,
    ImageShape,
    MultipleTestSets,
    MultiViewData,
    PictureData,
    ViewData,
)

ALL = (ChecksInputs, ClassLabels, CleanData, FactorData, GroundTruthDictionary, ImageShape,
       MultipleTestSets, MultiViewData, PictureData, ViewData)  # fmt: skip
HAS = {
    "digits": {ChecksInputs, ClassLabels, ImageShape, MultiViewData, CleanData, ViewData,
               PictureData},
    "dsprites": {ChecksInputs, ClassLabels, ImageShape, MultiViewData, CleanData, ViewData,
                 FactorData},
    "sparse_coding": {ChecksInputs, ClassLabels, MultiViewData, GroundTruthDictionary},
}  # fmt: skip


def _build(name: str):
    if name == "digits":
        return DigitsDataModule(batch_size=16, num_workers=0)
    if name == "dsprites":
        return DSpritesDataModule(train_size=32, val_size=8, test_size=8, batch_size=8)
    return SparseCodingDataModule(n=32, val_n=8, batch_size=8)


@pytest.mark.parametrize("name", sorted(HAS))
def test_datamodules_have_exactly_the_extras_they_claim(name: str) -> None:
    dm = _build(name)
    has = {protocol for protocol in ALL if isinstance(dm, protocol)}
    assert has == HAS[name], sorted(p.__name__ for p in has ^ HAS[name])


@pytest.mark.parametrize("name", ["digits", "dsprites"])
def test_clean_and_view_loaders_keep_their_documented_shapes(name: str) -> None:
    dm = _build(name)
    images, labels = next(iter(dm.clean_dataloader("val", 0, 2)))
    assert images.shape[1:] == (dm.in_channels, dm.image_size, dm.image_size)
    assert len(images) == len(labels)
    train, _ = next(iter(dm.clean_train_dataloader()))
    assert train.shape[1:] == images.shape[1:]
    views, _ = next(iter(dm.view_dataloader("val")))
    assert len(views) == dm.n_views and views[0].shape[1:] == images.shape[1:]


def test_callbacks_name_the_missing_extra() -> None:
    sparse = SimpleNamespace(datamodule=_build("sparse_coding"))
    with pytest.raises(ConfigError, match="needs a DataModule with view_dataloader") as error:
        FeatureStatistics()._sepin(sparse, torch.nn.Module(), "val")  # type: ignore[arg-type]
    assert error.value.key == "sepin" and "SparseCodingDataModule" in str(error.value)
    with pytest.raises(ConfigError, match="TopActivations needs a DataModule with val_dataset"):
        _picture_data(SimpleNamespace(datamodule=_build("dsprites")))  # type: ignore[arg-type]
