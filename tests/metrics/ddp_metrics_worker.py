"""Check of every metric in the 2-process gloo group (``tests.gloo_group``)."""

from __future__ import annotations

from typing import Any

import torch
from torchmetrics import Metric

from ncl_lightning.callbacks.feature_statistics import FeatureMetricSet
from ncl_lightning.metrics import (
    EffectiveRank,
    ExpectedActivation,
    OrthogonalityError,
    RetrievalPrecision,
    SemanticConsistency,
    SemanticEntropy,
    SpectralEntropy,
    TopKSemanticConsistency,
)

NUM_FEATURES, NUM_CLASSES = 12, 5
# Uneven split (and uneven batches) exercise the padded gather of the list states.
RANK_SLICES = (slice(0, 37), slice(37, 80))

# Metrics that take labels in ``update``.
LABELLED = {
    "consistency",
    "top_k",
    "top_k_all",
    "entropy",
    "entropy_freq",
    "retrieval",
    "retrieval_sel",
    "retrieval_euclidean",
    "feature_set",
}


def make_data() -> tuple[torch.Tensor, torch.Tensor]:
    """Fixed sparse non-negative features (exact zeros, a dead dim) and labels."""
    g = torch.Generator().manual_seed(0)
    z = torch.relu(torch.randn(80, NUM_FEATURES, generator=g) + 0.2)
    z[:, 3] = 0.0
    labels = torch.randint(0, NUM_CLASSES, (80,), generator=g)
    return z, labels


def make_metrics() -> dict[str, Metric | FeatureMetricSet]:
    """One of every metric of this package, the releases' variants, and the callback's set
    (whose variants read synchronised states inside ``sync_context``)."""
    d, c = NUM_FEATURES, NUM_CLASSES
    return {
        "orthogonality": OrthogonalityError(d),
        "effective_rank": EffectiveRank(d),
        "consistency": SemanticConsistency(d, c),
        "top_k": TopKSemanticConsistency(d, c, top_k=8),
        # More slots than samples, on each rank and in total: -inf padding must be ignored.
        "top_k_all": TopKSemanticConsistency(d, c, top_k=100),
        "entropy": SemanticEntropy(d, c),
        "entropy_freq": SemanticEntropy(d, c, weighting="frequency"),
        "expected_activation": ExpectedActivation(d),
        "retrieval": RetrievalPrecision(k=5),
        "retrieval_sel": RetrievalPrecision(k=5, num_selected=6),
        "spectral_entropy": SpectralEntropy(d),
        "orthogonality_mean": OrthogonalityError(d, reduction="mean_all_entries"),
        "orthogonality_median": OrthogonalityError(d, reduction="median_all_entries"),
        "retrieval_euclidean": RetrievalPrecision(k=5, num_selected=6, distance="euclidean"),
        "feature_set": FeatureMetricSet(d, c, top_k=8, retrieval_k=5, retrieval_dims=6),
    }


def update_all(
    metrics: dict[str, Metric | FeatureMetricSet], z: torch.Tensor, labels: torch.Tensor
) -> None:
    """Feed ``(z, labels)`` to every metric in two uneven batches."""
    cut = z.shape[0] // 3
    for zb, yb in ((z[:cut], labels[:cut]), (z[cut:], labels[cut:])):
        for name, metric in metrics.items():
            if name in LABELLED:
                metric.update(zb, yb)
            else:
                metric.update(zb)


def results(metrics: dict[str, Metric | FeatureMetricSet]) -> dict[str, Any]:
    """Every metric's ``compute()``, and the callback set's per-dimension vectors
    (``FeatureMetricSet.dimensions``, the W&B table's columns) as ``dimensions/<name>``."""
    out: dict[str, Any] = {name: metric.compute() for name, metric in metrics.items()}
    feature_set = metrics["feature_set"]
    assert isinstance(feature_set, FeatureMetricSet)
    return out | {f"dimensions/{k}": v for k, v in feature_set.dimensions().items()}


def rank_result(rank: int, world: int) -> dict[str, Any]:
    """In the running group, update every metric with this rank's share of the data;
    return the synced results."""
    z, labels = make_data()
    metrics = make_metrics()
    update_all(metrics, z[RANK_SLICES[rank]], labels[RANK_SLICES[rank]])
    return results(metrics)
