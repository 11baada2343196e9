"""Metric benchmark: ``python -m benchmarks metrics``.

Synthetic NCL-like features: ``N = 10,000`` samples, ``d = 512`` non-negative, sparse
dimensions (ReLU of a shifted Gaussian around one of ``C = 100`` balanced class means), a
fixed seed. Timed with torch's default thread count, median of ``repeats`` after a warm-up:

(a) every streaming metric except SEPIN and retrieval, updated over batches of 256 and
    computed (goal < 2 s in total on a 2-core CPU);
(b) SEPIN@k on 10,000 pairs of views (features + small noise, ReLU), in batches of 256 as
    in training: the vectorised estimator (goal < 30 s) against the per-dimension loop of
    InfoNCE calls, which is timed on a few batches and extrapolated;
(c) retrieval precision@10 on the 256 dims of largest expected activation (reported only).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor
from torchmetrics import Metric

from benchmarks import Timing, median_seconds
from ncl_lightning.foundation.progress import Progress
from ncl_lightning.metrics import (
    ActiveDimensions,
    EffectiveRank,
    ExpectedActivation,
    OrthogonalityError,
    SemanticConsistency,
    SemanticEntropy,
    Sparsity,
    TopKSemanticConsistency,
)
from ncl_lightning.metrics.functional.activation import (
    expected_activation,
    select_by_expected_activation,
)
from ncl_lightning.metrics.functional.retrieval import retrieval_precision
from ncl_lightning.metrics.functional.sepin import sepin_per_dimension, sepin_per_dimension_loop
from ncl_lightning.metrics.sepin import SEPIN

NUM_SAMPLES, NUM_FEATURES, NUM_CLASSES = 10_000, 512, 100
BATCH_SIZE = 256
TEMPERATURE = 0.2  # the CIFAR NCL setting
VIEW_NOISE = 0.1
CLASS_SCALE = 0.5  # class-mean spread: retrieval precision@10 about 0.35, not trivially 1
LOOP_BATCHES = 3  # batches the slow loop baseline is timed on before extrapolating
SEED = 0


def make_data(
    num_samples: int = NUM_SAMPLES,
    num_features: int = NUM_FEATURES,
    num_classes: int = NUM_CLASSES,
    seed: int = SEED,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Synthetic sparse non-negative features with class structure, and two noisy views.

    Args:
        num_samples: ``N`` (a multiple of ``num_classes`` gives exactly balanced classes).
        num_features: ``d``.
        num_classes: ``C``.
        seed: Generator seed.

    Returns:
        ``(z [N, d], labels [N], view1 [N, d], view2 [N, d])``;
        ``z = relu(μ_y + ε - 1)`` with ``μ_y ~ N(0, 0.5²)``, ``ε ~ N(0, 1)`` (about 80 %
        zeros); each view is ``relu`` of the same pre-activation plus ``N(0, 0.1²)`` noise.
    """
    g = torch.Generator().manual_seed(seed)
    labels = torch.arange(num_samples) % num_classes
    labels = labels[torch.randperm(num_samples, generator=g)]
    means = CLASS_SCALE * torch.randn(num_classes, num_features, generator=g)
    pre = means[labels] + torch.randn(num_samples, num_features, generator=g) - 1.0
    view1 = torch.relu(pre + VIEW_NOISE * torch.randn(pre.shape, generator=g))
    view2 = torch.relu(pre + VIEW_NOISE * torch.randn(pre.shape, generator=g))
    return torch.relu(pre), labels, view1, view2


def _stream(metric: Metric, z: Tensor, labels: Tensor | None) -> Callable[[], object]:
    """A closure that resets ``metric``, streams ``z`` in training-size batches and computes."""

    def run() -> object:
        metric.reset()
        label_batches = labels.split(BATCH_SIZE) if labels is not None else None
        for i, batch in enumerate(z.split(BATCH_SIZE)):
            if label_batches is None:
                metric.update(batch)
            else:
                metric.update(batch, label_batches[i])
        return metric.compute()

    return run


def _streaming_metrics(z: Tensor, labels: Tensor, repeats: int) -> list[Timing]:
    zeros = (z == 0).float().mean().item()
    d, c = z.shape[1], NUM_CLASSES
    metrics: list[tuple[str, Metric, bool]] = [
        ("Sparsity", Sparsity(), False),
        ("ActiveDimensions", ActiveDimensions(d), False),
        ("OrthogonalityError", OrthogonalityError(d), False),
        ("EffectiveRank", EffectiveRank(d), False),
        ("SemanticConsistency", SemanticConsistency(d, c), True),
        ("TopKSemanticConsistency (k=100)", TopKSemanticConsistency(d, c), True),
        ("SemanticEntropy (activation)", SemanticEntropy(d, c, weighting="activation"), True),
        ("SemanticEntropy (frequency)", SemanticEntropy(d, c, weighting="frequency"), True),
        ("ExpectedActivation", ExpectedActivation(d), False),
    ]
    rows = []
    for name, metric, needs_labels in metrics:
        run = _stream(metric, z, labels if needs_labels else None)
        seconds = median_seconds(run, repeats)
        value = run()
        note = f"value {value.item():.4g}" if value.numel() == 1 else f"[{value.numel()}]"
        rows.append(Timing(f"  {name}", seconds, note=note))
    total = Timing(
        "(a) all metrics but SEPIN and retrieval, update+compute, batches of 256",
        sum(row.seconds for row in rows),
        goal=2.0,
        note=f"sum of the rows below; data {z.shape[0]:,} x {z.shape[1]}, {zeros:.0%} zeros",
    )
    return [total, *rows]


def _sepin(view1: Tensor, view2: Tensor, repeats: int) -> list[Timing]:
    metric = SEPIN(view1.shape[1], TEMPERATURE)

    def vectorised() -> object:
        metric.reset()
        for a, b in zip(view1.split(BATCH_SIZE), view2.split(BATCH_SIZE), strict=True):
            metric.update(a, b)
        return metric.compute()

    seconds = median_seconds(vectorised, repeats)
    values = vectorised()
    num_batches = -(-view1.shape[0] // BATCH_SIZE)
    fast = Timing(
        f"(b) SEPIN@all, vectorised, {view1.shape[0]:,} pairs in {num_batches} batches of 256",
        seconds,
        goal=30.0,
        note=", ".join(f"{k} {v.item():.2e}" for k, v in values.items()),
    )

    # The loop baseline: one InfoNCE per dropped dimension, on LOOP_BATCHES full batches.
    n_loop = LOOP_BATCHES * BATCH_SIZE
    loop_pairs = list(
        zip(view1[:n_loop].split(BATCH_SIZE), view2[:n_loop].split(BATCH_SIZE), strict=True)
    )

    def loop() -> None:
        for a, b in loop_pairs:
            sepin_per_dimension_loop(a, b, TEMPERATURE)

    loop_seconds = median_seconds(loop, max(1, repeats // 2)) * view1.shape[0] / n_loop
    a, b = loop_pairs[0]
    diff = sepin_per_dimension(a, b, TEMPERATURE) - sepin_per_dimension_loop(a, b, TEMPERATURE)
    slow = Timing(
        "    per-dimension loop of info_nce, same data (extrapolated)",
        loop_seconds,
        note=(
            f"timed on {LOOP_BATCHES} batches, x {view1.shape[0] / n_loop:.2f}; "
            f"{loop_seconds / seconds:.1f}x the vectorised time; "
            f"max abs difference {diff.abs().max().item():.1e} on batch 1"
        ),
    )
    return [fast, slow]


def _retrieval(z: Tensor, labels: Tensor, repeats: int) -> Timing:
    keep = z.shape[1] // 2  # NCL paper Table 1 keeps 256 of 512
    dims = select_by_expected_activation(expected_activation(z), keep)

    def run() -> Tensor:
        return retrieval_precision(z, labels, k=10, dims=dims)

    seconds = median_seconds(run, repeats)
    return Timing(
        f"(c) retrieval precision@10, {z.shape[0]:,} x {keep} EA-selected dims",
        seconds,
        note=f"value {run().item():.4f}",
    )


def run(
    repeats: int = 3, num_samples: int = NUM_SAMPLES, num_features: int = NUM_FEATURES
) -> list[Timing]:
    """Time (a) the streaming metrics, (b) SEPIN vectorised vs loop, (c) retrieval.

    Args:
        repeats: Timed repeats per measurement (median reported), after one warm-up.
        num_samples: ``N`` (the goals are stated for the default 10,000).
        num_features: ``d`` (the goals are stated for the default 512).

    Returns:
        The rows of the printed table.
    """
    z, labels, view1, view2 = make_data(num_samples, num_features)
    progress = Progress(3, "metrics")
    with progress.unit("(a) streaming metrics"):
        rows = _streaming_metrics(z, labels, repeats)
    with progress.unit("(b) SEPIN, vectorised and loop"):
        rows += _sepin(view1, view2, repeats)
    with progress.unit("(c) retrieval precision@10"):
        rows.append(_retrieval(z, labels, repeats))
    progress.finish()
    return rows
