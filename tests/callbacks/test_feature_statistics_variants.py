"""``FeatureStatistics`` logs the releases' variants beside our keys, and BayesNCL's
ungated ``z⁺`` (a ``z_ungated`` field of the eval output) whenever the method returns it."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import NamedTuple

import pytest
import torch
from torch import Tensor

from ncl_lightning.callbacks import FeatureStatistics
from ncl_lightning.callbacks.feature_statistics import FeatureMetricSet
from ncl_lightning.metrics import functional as F

OURS = {
    "sparsity", "active_dims", "dead_dims", "activation_rate", "orthogonality_error",
    "effective_rank", "ea_max", "ea_top10_share", "semantic_consistency",
    "semantic_consistency_top100", "semantic_entropy", "semantic_entropy_freq",
    "semantic_entropy_mean_activation", "retrieval_p@10",
}  # fmt: skip
VARIANTS = {
    "spectral_entropy", "orthogonality_mean_all_entries", "orthogonality_median_all_entries",
    "sparsity_unnormalized", "retrieval_p@10_euclidean",
}  # fmt: skip


def features(n: int = 90, d: int = 12, seed: int = 0) -> tuple[Tensor, Tensor]:
    g = torch.Generator().manual_seed(seed)
    z = torch.relu(torch.randn(n, d, generator=g)) * 0.05
    z[:, 3] = 0.0  # a dead dimension
    return z, torch.arange(n) % 3


def test_metric_set_logs_each_variant_beside_ours_from_the_same_data() -> None:
    z, labels = features()
    metric_set = FeatureMetricSet(12, 3, retrieval_dims=6)
    metric_set.update(z[:40], labels[:40])
    metric_set.update(z[40:], labels[40:])
    out = metric_set.compute()
    assert set(out) == OURS | VARIANTS
    assert out["spectral_entropy"].item() == pytest.approx(F.spectral_entropy(z).item(), rel=1e-6)
    assert out["spectral_entropy"].item() == pytest.approx(math.log(out["effective_rank"].item()))
    for reduction in ("mean_all_entries", "median_all_entries"):
        expected = F.orthogonality_error(z, reduction=reduction).item()
        assert out[f"orthogonality_{reduction}"].item() == pytest.approx(expected, rel=1e-6)
    assert out["orthogonality_error"].item() == pytest.approx(F.orthogonality_error(z).item())
    assert out["sparsity_unnormalized"].item() == pytest.approx(
        F.sparsity(z, 1e-2, normalize=False).item()
    )
    dims = F.select_by_expected_activation(F.expected_activation(z), 6)
    for distance, key in (("cosine", "retrieval_p@10"), ("euclidean", "retrieval_p@10_euclidean")):
        expected = F.retrieval_precision(z, labels, 10, dims=dims, distance=distance).item()
        assert out[key].item() == pytest.approx(expected), key
    assert all(torch.isfinite(v).all() for v in out.values())
    # Computing twice gives the same values (the states were un-synced after each read).
    again = metric_set.compute()
    assert all(again[k].item() == pytest.approx(v.item(), nan_ok=True) for k, v in out.items())


class Gated(NamedTuple):
    h: Tensor
    z: Tensor
    mask: Tensor
    z_ungated: Tensor | None


class Recorder:
    """The slice of a LightningModule the callback uses: ``log``."""

    def __init__(self) -> None:
        self.logged: dict[str, float] = {}

    def log(self, key: str, value: Tensor, sync_dist: bool = False) -> None:
        assert sync_dist
        self.logged[key] = float(value)


def run_validation(outputs: list[Gated], labels: list[Tensor]) -> dict[str, float]:
    trainer = SimpleNamespace(
        sanity_checking=False, current_epoch=0, max_epochs=1,
        datamodule=SimpleNamespace(num_classes=3),
    )  # fmt: skip
    module = Recorder()
    callback = FeatureStatistics(spaces=["z", "h"], sepin=False)
    callback.on_validation_epoch_start(trainer, module)
    for i, (out, y) in enumerate(zip(outputs, labels, strict=True)):
        callback.on_validation_batch_end(trainer, module, out, (None, y), i)
    callback.on_validation_epoch_end(trainer, module)
    return module.logged


def gated_batches(with_ungated: bool) -> tuple[list[Gated], list[Tensor]]:
    z, labels = features(n=60)
    g = torch.Generator().manual_seed(1)
    mask = (torch.rand(z.shape, generator=g) > 0.4).float()
    h = torch.randn(60, 8, generator=g)
    rows = [slice(0, 30), slice(30, 60)]
    outputs = [Gated(h[r], z[r] * mask[r], mask[r], z[r] if with_ungated else None) for r in rows]
    return outputs, [labels[r] for r in rows]


def test_callback_logs_the_variants_and_the_ungated_space_when_present() -> None:
    outputs, labels = gated_batches(with_ungated=True)
    logged = run_validation(outputs, labels)
    for space in ("z", "h", "z_ungated"):
        keys = {k.split("/", 2)[2] for k in logged if k.startswith(f"val/{space}/")}
        assert keys == OURS | VARIANTS, space
    z = torch.cat([o.z_ungated for o in outputs])
    y = torch.cat(labels)
    assert logged["val/z_ungated/semantic_consistency"] == pytest.approx(
        F.semantic_consistency(z, y, 3).item()
    )
    gated = torch.cat([o.z for o in outputs])
    assert logged["val/z/semantic_consistency"] == pytest.approx(
        F.semantic_consistency(gated, y, 3).item()
    )
    assert logged["val/z/spectral_entropy"] == pytest.approx(F.spectral_entropy(gated).item())


def test_callback_skips_the_ungated_space_when_the_method_has_none() -> None:
    outputs, labels = gated_batches(with_ungated=False)
    logged = run_validation(outputs, labels)
    assert not any(k.startswith("val/z_ungated/") for k in logged)
    assert {f"val/z/{k}" for k in OURS | VARIANTS} <= set(logged)
