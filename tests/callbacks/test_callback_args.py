"""Callback arguments are checked when the callback is built, before any training."""

from __future__ import annotations

import lightning as L
import pytest
import torch

from ncl_lightning.callbacks import FeatureStatistics, TopActivations
from ncl_lightning.data import DigitsDataModule
from ncl_lightning.methods import NCL
from ncl_lightning.nn import SmallCNN


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"every_n_epochs": 0}, "every_n_epochs must be an integer >= 1, got 0"),
        ({"spaces": ["a b"]}, "spaces must be a non-empty list of feature names"),
        ({"spaces": []}, "spaces must be a non-empty list"),
        ({"top_k": 0}, "top_k must be an integer >= 1, got 0"),
        ({"retrieval_dims": 0}, "retrieval_dims must be an integer >= 1, got 0"),
        ({"sepin_max_batches": 0}, "sepin_max_batches must be an integer >= 1, got 0"),
        ({"eps": -1.0}, "eps must be >= 0"),
    ],
)
def test_feature_statistics_rejects_bad_arguments(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        FeatureStatistics(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"num_dims": 0}, "num_dims must be an integer >= 1, got 0"),
        ({"cell": 0}, "cell must be an integer >= 1, got 0"),
        ({"space": "p"}, "space must be one of 'z', 'h'"),
    ],
)
def test_top_activations_rejects_bad_arguments(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        TopActivations(**kwargs)


def test_feature_metric_set_passes_eps_to_every_thresholded_metric():
    from ncl_lightning.callbacks.feature_statistics import FeatureMetricSet

    metrics = FeatureMetricSet(num_features=8, num_classes=3, eps=0.3, top_k=5)
    thresholded = [m for m in [*metrics.unlabelled.values(), *metrics.labelled.values()]]
    eps = {type(m).__name__: m.eps for m in thresholded if hasattr(m, "eps")}
    assert eps and set(eps.values()) == {0.3}, eps


def test_ea_top10_share_is_a_share_of_magnitudes_for_signed_features():
    """Signed (CL) features have EAs that cancel: the share of |EA| stays in [0, 1]."""
    from ncl_lightning.callbacks.feature_statistics import FeatureMetricSet

    g = torch.Generator().manual_seed(0)
    z = torch.randn(200, 32, generator=g)  # EAs of both signs, summing to about 0
    metrics = FeatureMetricSet(num_features=32, num_classes=0)
    metrics.update(z, torch.zeros(len(z), dtype=torch.long))
    out = metrics.compute()
    ea = (z / z.norm(dim=1, keepdim=True)).double().mean(0).abs().sort(descending=True).values
    expected = float(ea[:10].sum() / ea.sum())
    assert 0.0 <= float(out["ea_top10_share"]) <= 1.0
    assert float(out["ea_top10_share"]) == pytest.approx(expected, rel=1e-3)


def test_feature_statistics_rejects_an_unknown_missing_policy() -> None:
    with pytest.raises(ValueError, match="missing must be one of"):
        FeatureStatistics(missing="ignore")  # type: ignore[arg-type]


class _QuietNCL(NCL):
    """NCL whose validation step returns nothing (a subclass the default must not break)."""

    def validation_step(self, batch, batch_idx):  # type: ignore[override]
        return None


def _fit_quiet(callback: FeatureStatistics, tmp_path) -> L.Trainer:
    model = _QuietNCL(
        SmallCNN(in_channels=1, width=4, out_dim=8), proj_hidden_dim=8, proj_output_dim=8,
        num_classes=10, batch_size=32,
    )  # fmt: skip
    trainer = L.Trainer(
        accelerator="cpu", max_epochs=1, limit_train_batches=2, limit_val_batches=1,
        num_sanity_val_steps=0, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path,
        callbacks=[callback],
    )  # fmt: skip
    trainer.fit(model, DigitsDataModule(batch_size=32, num_workers=0))
    return trainer


@pytest.mark.slow
def test_missing_spaces_stop_a_configured_instance_and_skip_the_default_one(tmp_path) -> None:
    with pytest.raises(ValueError, match=r"FeatureStatistics\(spaces=\['z'\]\)"):
        _fit_quiet(FeatureStatistics(spaces=["z"], sepin=False), tmp_path / "a")
    trainer = _fit_quiet(FeatureStatistics(spaces=["z"], sepin=False, missing="skip"), tmp_path)
    assert trainer.state.finished
    assert not [k for k in trainer.callback_metrics if k.startswith("val/z/")]
