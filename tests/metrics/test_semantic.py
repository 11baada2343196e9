"""Semantic consistency / entropy against python-loop references and constructed cases."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch

from ncl_lightning.metrics import SemanticConsistency, SemanticEntropy, TopKSemanticConsistency
from ncl_lightning.metrics.functional import semantic_consistency, semantic_entropy
from tests.metrics.reference import (
    EPS,
    batches,
    dense_features,
    normalized_rows,
    one_hot_features,
    sparse_features,
)


def ref_consistency(z, labels, top_k=None):
    rows, ys = normalized_rows(z), labels.tolist()
    scores = []
    for j in range(len(rows[0])):
        column = [row[j] for row in rows]
        if not any(abs(v) > EPS for v in column):
            continue
        if top_k is None:
            chosen = [y for v, y in zip(column, ys, strict=True) if abs(v) > EPS]
        else:
            order = sorted(range(len(column)), key=lambda i: -column[i])
            chosen = [ys[i] for i in order[: min(top_k, len(column))]]
        scores.append(max(Counter(chosen).values()) / len(chosen))
    return 100.0 * sum(scores) / len(scores)


def ref_entropy(z, labels, num_classes, weighting):
    rows, ys = normalized_rows(z), labels.tolist()
    entropies = []
    for j in range(len(rows[0])):
        column = [row[j] for row in rows]
        if not any(abs(v) > EPS for v in column):
            continue
        weights = [0.0] * num_classes
        for v, y in zip(column, ys, strict=True):
            if weighting == "activation":
                weights[y] += abs(v)
            elif abs(v) > EPS:
                weights[y] += 1.0
        total = sum(weights)
        probs = [w / total for w in weights]
        entropies.append(-sum(p * math.log(p) for p in probs if p > 1e-5))
    return sum(entropies) / len(entropies)


DATA = {"sparse": sparse_features, "dense": dense_features}


@pytest.mark.parametrize("kind", ["sparse", "dense"])
@pytest.mark.parametrize("top_k", [None, 1, 7, 1000])
def test_consistency_matches_reference(kind, top_k):
    z, y = DATA[kind]()
    got = semantic_consistency(z, y, 4, EPS, top_k=top_k)
    assert got.item() == pytest.approx(ref_consistency(z, y, top_k), rel=1e-6)


@pytest.mark.parametrize("kind", ["sparse", "dense"])
@pytest.mark.parametrize("weighting", ["activation", "frequency"])
def test_entropy_matches_reference(kind, weighting):
    z, y = DATA[kind]()
    got = semantic_entropy(z, y, 4, EPS, weighting=weighting)
    assert got.item() == pytest.approx(ref_entropy(z, y, 4, weighting), rel=1e-5)


def test_one_hot_features_are_perfectly_consistent():
    z, y = one_hot_features(num_classes=5)
    assert semantic_consistency(z, y, 5).item() == pytest.approx(100.0)
    assert semantic_consistency(z, y, 5, top_k=3).item() == pytest.approx(100.0)
    assert semantic_entropy(z, y, 5).item() == pytest.approx(0.0, abs=1e-7)
    assert semantic_entropy(z, y, 5, weighting="frequency").item() == pytest.approx(0.0, abs=1e-7)


@pytest.mark.parametrize("num_classes", [4, 10])
def test_dense_features_on_balanced_set(num_classes):
    n = 20 * num_classes
    labels = torch.arange(n) % num_classes
    z = torch.rand(n, 16, generator=torch.Generator().manual_seed(0)) + 0.1
    assert semantic_consistency(z, labels, num_classes).item() == pytest.approx(100 / num_classes)
    h_freq = semantic_entropy(z, labels, num_classes, weighting="frequency")
    assert h_freq.item() == pytest.approx(math.log(num_classes), rel=1e-6)
    # Activation weighting: close to ln C for random magnitudes, exactly ln C for constant ones.
    h_act = semantic_entropy(z, labels, num_classes).item()
    assert abs(h_act - math.log(num_classes)) < 0.05
    constant = torch.ones(n, 16)
    h_const = semantic_entropy(constant, labels, num_classes).item()
    assert h_const == pytest.approx(math.log(num_classes), rel=1e-6)


def test_no_active_dimension_gives_nan():
    z, y = torch.zeros(6, 3), torch.arange(6) % 2
    assert torch.isnan(semantic_consistency(z, y, 2))
    assert torch.isnan(semantic_entropy(z, y, 2))


def test_input_validation():
    z, y = sparse_features()
    with pytest.raises(ValueError, match=r"labels must hold values in \[0, 4\), got values from 4"):
        semantic_consistency(z, y + 4, 4)
    with pytest.raises(ValueError, match="labels must have shape"):
        semantic_entropy(z, y[:-1], 4)
    with pytest.raises(ValueError, match="weighting"):
        semantic_entropy(z, y, 4, weighting="bogus")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="top_k"):
        semantic_consistency(z, y, 4, top_k=0)
    with pytest.raises(ValueError, match="num_classes"):
        SemanticConsistency(10, 0)
    with pytest.raises(ValueError, match=r"z must have shape \[N, 9\], got \(\d+, 10\)"):
        SemanticEntropy(9, 4).update(z, y)
    with pytest.raises(ValueError, match="top_k"):
        TopKSemanticConsistency(10, 4, top_k=0)


SIZES = [10, 1, 17, 20]


@pytest.mark.parametrize("kind", ["sparse", "dense"])
def test_streaming_equals_one_shot(kind):
    z, y = DATA[kind]()
    metrics = {
        "consistency": SemanticConsistency(10, 4),
        "top_k": TopKSemanticConsistency(10, 4, top_k=6),
        "entropy": SemanticEntropy(10, 4),
        "entropy_freq": SemanticEntropy(10, 4, weighting="frequency"),
    }
    for zb, yb in batches(z, y, SIZES):
        for metric in metrics.values():
            metric.update(zb, yb)
    expected = {
        "consistency": semantic_consistency(z, y, 4),
        "top_k": semantic_consistency(z, y, 4, top_k=6),
        "entropy": semantic_entropy(z, y, 4),
        "entropy_freq": semantic_entropy(z, y, 4, weighting="frequency"),
    }
    for name, metric in metrics.items():
        torch.testing.assert_close(metric.compute(), expected[name], rtol=1e-5, atol=1e-6)


def test_top_k_metric_with_fewer_samples_than_k():
    z, y = dense_features(n=30)
    metric = TopKSemanticConsistency(10, 4, top_k=100)
    for zb, yb in batches(z, y, [4, 26]):
        metric.update(zb, yb)
    assert metric.top_values.shape == (100, 10)  # memory is independent of N
    expected = semantic_consistency(z, y, 4, top_k=100)
    torch.testing.assert_close(metric.compute(), expected)
    assert expected.item() == pytest.approx(ref_consistency(z, y, top_k=30))


def test_top_k_metric_forward_and_reset():
    z, y = dense_features()
    metric = TopKSemanticConsistency(10, 4, top_k=5)
    for zb, yb in batches(z, y, SIZES):
        batch_value = metric(zb, yb)  # forward: batch value, and accumulates
        torch.testing.assert_close(batch_value, semantic_consistency(zb, yb, 4, top_k=5))
        assert metric.top_values.shape == (5, 10)
    torch.testing.assert_close(metric.compute(), semantic_consistency(z, y, 4, top_k=5))
    metric.reset()
    metric.update(z[:8], y[:8])
    torch.testing.assert_close(metric.compute(), semantic_consistency(z[:8], y[:8], 4, top_k=5))


def test_metric_flags():
    assert SemanticConsistency.higher_is_better is True
    assert TopKSemanticConsistency.higher_is_better is True
    assert SemanticEntropy.higher_is_better is False
    for cls in (SemanticConsistency, TopKSemanticConsistency, SemanticEntropy):
        assert cls.full_state_update is False
        assert cls.is_differentiable is False
