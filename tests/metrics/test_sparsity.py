"""Sparsity / active-dimension metrics against slow loop references."""

from __future__ import annotations

import math

import pytest
import torch

from ncl_lightning.metrics import ActiveDimensions, Sparsity
from ncl_lightning.metrics.functional import activation_rate, active_dimensions, sparsity

EPS = 1e-5


def normalized_rows(z):
    rows = []
    for row in z.tolist():
        norm = math.sqrt(sum(v * v for v in row))
        rows.append([v / norm if norm > 0 else 0.0 for v in row])
    return rows


def ref_sparsity(z):
    rows = normalized_rows(z)
    return sum(sum(abs(v) <= EPS for v in row) / len(row) for row in rows) / len(rows)


def ref_active(z):
    rows = normalized_rows(z)
    return sum(any(abs(row[j]) > EPS for row in rows) for j in range(len(rows[0])))


def sparse_features(n=40, d=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    z = torch.relu(torch.randn(n, d, generator=g))
    z[:, 3] = 0.0  # a dead dimension
    z[:, 5] = 1e-9 * z[:, 5]  # tiny after normalisation -> dead too
    z[7] = 0.0  # an all-zero sample counts as all-zero
    return z


def test_functional_matches_reference():
    z = sparse_features()
    assert sparsity(z, EPS).item() == pytest.approx(ref_sparsity(z))
    assert active_dimensions(z, EPS).item() == ref_active(z) == 10
    assert activation_rate(z, EPS).item() == pytest.approx(10 / 12)


def test_dense_and_zero_extremes():
    assert sparsity(torch.randn(5, 7).abs() + 0.1).item() == 0.0
    assert sparsity(torch.zeros(3, 4)).item() == 1.0
    assert active_dimensions(torch.zeros(3, 4)).item() == 0


def test_scale_invariant_and_sign_agnostic():
    z = sparse_features() - 0.3
    assert sparsity(z * 1e6).item() == pytest.approx(sparsity(z).item())
    assert sparsity(-z).item() == pytest.approx(sparsity(z).item())


def test_streaming_equals_one_shot():
    z = sparse_features(n=50)
    s, a = Sparsity(), ActiveDimensions(num_features=12)
    rate = ActiveDimensions(num_features=12, normalize=True)
    for chunk in z.split(7):
        s.update(chunk)
        a.update(chunk)
        rate.update(chunk)
    assert s.compute().item() == pytest.approx(ref_sparsity(z), rel=1e-6)
    assert a.compute().item() == ref_active(z)
    assert rate.compute().item() == pytest.approx(ref_active(z) / 12)
    s.reset()
    s.update(z[:10])
    assert s.compute().item() == pytest.approx(ref_sparsity(z[:10]), rel=1e-6)


def test_rank_merge_equals_one_shot():
    # merge_state applies each state's dist_reduce_fx, as the DDP sync does across ranks.
    z = sparse_features(n=30)
    for make in (Sparsity, lambda: ActiveDimensions(num_features=12)):
        rank0, rank1, full = make(), make(), make()
        rank0.update(z[:13])
        rank1.update(z[13:])
        full.update(z)
        rank0.merge_state(rank1)
        torch.testing.assert_close(rank0.compute(), full.compute())


def test_dead_dims_readable_from_state():
    a = ActiveDimensions(num_features=12)
    a.update(sparse_features())
    assert a.activation_count[3].item() == 0 and a.activation_count[0].item() > 0


def test_metric_conventions():
    for metric in (Sparsity(), ActiveDimensions(num_features=2)):
        assert metric.full_state_update is False
        assert metric.higher_is_better is True
        assert all(fx is not None for fx in metric._reductions.values())


def test_errors():
    with pytest.raises(ValueError, match=r"\[N, 4\]"):
        ActiveDimensions(num_features=4).update(torch.ones(2, 3))
    with pytest.raises(ValueError, match="num_features"):
        ActiveDimensions(num_features=0)
    with pytest.raises(ValueError, match="eps"):
        Sparsity(eps=-1.0)
    with pytest.raises(ValueError, match=r"\[N, d\]"):
        sparsity(torch.ones(3))
