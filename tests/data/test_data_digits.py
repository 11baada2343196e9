"""DigitsDataModule, the base-class contract and a short Lightning run through it."""

from __future__ import annotations

from collections.abc import Callable

import lightning as L
import pytest
import torch
from torch import nn

from ncl_lightning.data import DigitsDataModule, MultiViewDataModule


def test_digits_batches(check_batches: Callable[..., None]) -> None:
    dm = DigitsDataModule(n_views=3)
    assert (dm.num_classes, dm.in_channels, dm.image_size, dm.batch_size) == (10, 1, 8, 128)
    dm.setup("fit")
    assert len(dm.train_dataset) + len(dm.val_dataset) == 1797
    assert len(dm.val_dataset) == 360
    check_batches(dm, n_views=3)
    assert len(dm.train_dataloader()) == 1437 // 128  # drop_last


def test_digits_split_is_stratified_and_seeded() -> None:
    a, b, c = DigitsDataModule(seed=0), DigitsDataModule(seed=0), DigitsDataModule(seed=1)
    val = [dm.base_dataset("val").labels for dm in (a, b, c)]
    assert torch.equal(val[0], val[1]) and not torch.equal(val[0], val[2])
    counts = torch.bincount(val[0], minlength=10)
    assert counts.min() >= 34 and counts.max() <= 37  # ~20 % of each ~180-image class
    images = a.base_dataset("train").images
    assert images.shape[1:] == (1, 8, 8) and images.dtype == torch.uint8
    # 17 grey levels 0..16 scaled to 0..255: the 16 -> 255 end is exact.
    assert images.max() == 255 and set(images.unique().tolist()) <= {
        round(v * 255 / 16) for v in range(17)
    }
    assert a.base_dataset("test") is a.base_dataset("val")


def test_digits_clean_val_is_deterministic_and_normalised() -> None:
    dm = DigitsDataModule(batch_size=360)
    dm.setup("validate")
    x1, y1 = next(iter(dm.val_dataloader()))
    x2, y2 = next(iter(dm.val_dataloader()))
    assert torch.equal(x1, x2) and torch.equal(y1, y2)
    assert x1.mean().abs() < 0.1 and (x1.std() - 1).abs() < 0.1


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"batch_size": 0}, r"batch_size must be an integer >= 1, got 0"),
        ({"num_workers": -1}, r"num_workers must be an integer >= 0, got -1"),
        ({"n_views": 0}, r"n_views must be an integer >= 1, got 0"),
        ({"train_transform": "randaug"}, r"train_transform must be one of 'simclr'"),
        ({"val_fraction": 1.0}, r"val_fraction must be in \(0, 1\)"),
    ],
)
def test_bad_arguments(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        DigitsDataModule(**kwargs)


def test_single_view_supervised_transforms() -> None:
    """``n_views=1`` with ``crop_flip`` or ``none`` gives one view per image; ``none`` is
    the clean transform, so it is deterministic and equals the validation transform."""
    clean = DigitsDataModule(batch_size=16, num_workers=0, n_views=1, train_transform="none")
    clean.setup("fit")
    (view,), _ = clean.train_dataset[3]
    image, _ = clean.base_dataset("train")[3]
    assert torch.equal(view, clean.augmentation.clean()(image))
    crop = DigitsDataModule(batch_size=16, num_workers=0, n_views=1, train_transform="crop_flip")
    crop.setup("fit")
    views, y = next(iter(crop.train_dataloader()))
    assert len(views) == 1 and views[0].shape == (16, 1, 8, 8) and y.shape == (16,)


def test_too_few_samples_for_one_batch() -> None:
    dm = DigitsDataModule(batch_size=2000)
    with pytest.raises(ValueError, match=r"1437 samples.*batch_size=2000"):
        dm.setup("fit")


def test_wrong_channel_count_is_a_clear_error() -> None:
    from ncl_lightning.data import cifar_augmentation

    dm = DigitsDataModule(augmentation=cifar_augmentation(crop_size=8))
    with pytest.raises(ValueError, match=r"3 channel\(s\) but DigitsDataModule .* in_channels=1"):
        dm.setup("fit")


def test_base_requires_hooks() -> None:
    with pytest.raises(NotImplementedError, match="build_split"):
        MultiViewDataModule().build_split("train")
    with pytest.raises(RuntimeError, match="call setup"):
        DigitsDataModule().train_dataloader()


class _TinySSL(L.LightningModule):
    """Consumes the batch contract: views for training, clean images for val/test."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Linear(64, 4)

    def training_step(self, batch, batch_idx):
        views, _ = batch
        z = [self.net(v.flatten(1)) for v in views]
        return (z[0] - z[1]).pow(2).mean()

    def validation_step(self, batch, batch_idx):
        images, _ = batch
        self.log("val_norm", self.net(images.flatten(1)).norm())

    def test_step(self, batch, batch_idx):
        images, _ = batch
        self.log("test_norm", self.net(images.flatten(1)).norm())

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def test_lightning_fit_and_test() -> None:
    trainer = L.Trainer(
        accelerator="cpu",
        max_epochs=1,
        limit_train_batches=2,
        limit_val_batches=1,
        limit_test_batches=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    model, dm = _TinySSL(), DigitsDataModule(batch_size=32)
    trainer.fit(model, datamodule=dm)
    assert trainer.global_step == 2
    (result,) = trainer.test(model, datamodule=dm, verbose=False)
    assert "test_norm" in result
