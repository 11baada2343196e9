"""Callbacks that encode a split by themselves (SEPIN's view pairs, the top-activation
pictures) read no more batches than ``fast_dev_run`` / ``limit_val_batches`` let the
trainer read; without a limit, the whole split."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import lightning as L
import pytest
import torch

from ncl_lightning import NCL, DigitsDataModule, FeatureStatistics, SmallCNN, TopActivations
from ncl_lightning.callbacks.schedule import batch_limit


def trainer_with(val: float | int, test: float | int = 1.0) -> SimpleNamespace:
    return SimpleNamespace(
        limit_val_batches=val, limit_test_batches=test, num_val_batches=[7], num_test_batches=[7]
    )


@pytest.mark.parametrize(
    ("limit", "expected"), [(1.0, None), (3, 3), (1, 1), (0.5, 5), (0.01, 1), (0.25, 2)]
)
def test_batch_limit_reads_counts_and_fractions_like_the_trainer(limit, expected) -> None:
    loader = list(range(10))  # ten batches
    assert batch_limit(trainer_with(limit), "val", loader) == expected
    assert batch_limit(trainer_with(1.0, limit), "test", loader) == expected
    assert batch_limit(trainer_with(limit), "test", loader) is None  # the other stage


def test_a_loader_without_length_takes_the_trainer_count() -> None:
    assert batch_limit(trainer_with(0.5), "val", iter(range(10))) == 7


class CountingDigits(DigitsDataModule):
    """Counts the batches SEPIN draws from the DataModule's view loader."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.drawn = 0

    def _counted(self, loader):
        for batch in loader:
            self.drawn += 1
            yield batch

    def view_dataloader(self, *args, **kwargs):
        return self._counted(super().view_dataloader(*args, **kwargs))


def fit(tmp_path: Path, limit: float | int) -> tuple[CountingDigits, L.Trainer, NCL]:
    torch.manual_seed(0)
    data = CountingDigits(batch_size=64, augment_on="device")
    model = NCL(SmallCNN(1, 8, 16), proj_hidden_dim=32, proj_output_dim=16, knn_k=5)
    trainer = L.Trainer(
        accelerator="cpu", max_epochs=1, logger=False, enable_progress_bar=False,
        enable_model_summary=False, enable_checkpointing=False, num_sanity_val_steps=0,
        default_root_dir=tmp_path, limit_train_batches=2, limit_val_batches=limit,
        callbacks=[FeatureStatistics(spaces=["z"], sepin=True),
                   TopActivations(num_dims=2, num_images=2)],
    )  # fmt: skip
    trainer.fit(model, data)
    return data, trainer, model


@pytest.mark.parametrize("limit", [2, 1.0])
def test_own_loaders_read_the_batches_the_trainer_reads(tmp_path: Path, limit) -> None:
    data, trainer, model = fit(tmp_path, limit)
    whole = len(list(DigitsDataModule.view_dataloader(data, "val", 0, 1)))
    assert data.drawn == (2 if limit == 2 else whole)  # SEPIN's view pairs
    assert any(k.startswith("val/z/sepin") for k in trainer.callback_metrics)
    (pictures,) = [c for c in trainer.callbacks if isinstance(c, TopActivations)]
    encoded = pictures._encode(trainer, model, "val")  # the images the pictures rank
    assert len(encoded) == (2 * 64 if limit == 2 else 360)
