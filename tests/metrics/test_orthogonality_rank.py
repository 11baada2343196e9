"""Orthogonality error and effective rank against python-loop / SVD references."""

from __future__ import annotations

import math

import pytest
import torch

from ncl_lightning.metrics import EffectiveRank, OrthogonalityError
from ncl_lightning.metrics.functional import effective_rank, orthogonality_error
from tests.metrics.reference import (
    EPS,
    batches,
    dense_features,
    normalized_rows,
    one_hot_features,
    sparse_features,
)


def ref_orthogonality(z):
    rows = normalized_rows(z)
    d = len(rows[0])
    active = [j for j in range(d) if any(abs(row[j]) > EPS for row in rows)]
    columns = []
    for j in active:
        column = [row[j] for row in rows]
        norm = math.sqrt(sum(v * v for v in column))
        columns.append([v / norm for v in column])
    total, pairs = 0.0, 0
    for a in range(len(columns)):
        for b in range(len(columns)):
            if a != b:
                total += abs(sum(x * y for x, y in zip(columns[a], columns[b], strict=True)))
                pairs += 1
    return total / pairs if pairs else 0.0


def ref_effective_rank(z):
    s = torch.linalg.svdvals(torch.tensor(normalized_rows(z), dtype=torch.float64)).tolist()
    p = [v / sum(s) for v in s]
    return math.exp(-sum(q * math.log(q) for q in p if q > 0))


DATA = {"sparse": sparse_features, "dense": dense_features}


@pytest.mark.parametrize("kind", ["sparse", "dense"])
def test_orthogonality_matches_reference(kind):
    z, _ = DATA[kind]()
    assert orthogonality_error(z, EPS).item() == pytest.approx(ref_orthogonality(z), rel=1e-5)


@pytest.mark.parametrize("kind", ["sparse", "dense"])
def test_effective_rank_matches_svd_reference(kind):
    z, _ = DATA[kind]()
    assert effective_rank(z).item() == pytest.approx(ref_effective_rank(z), rel=1e-5)


def test_orthogonality_constructed_cases():
    z, _ = one_hot_features()
    assert orthogonality_error(z).item() == 0.0
    column = torch.rand(20, 1, generator=torch.Generator().manual_seed(0)) + 0.1
    assert orthogonality_error(column.repeat(1, 3)).item() == pytest.approx(1.0)
    # Fewer than 2 active dims: nothing to compare, defined as 0.
    single = torch.zeros(5, 4)
    single[:, 1] = 1.0
    assert orthogonality_error(single).item() == 0.0
    assert orthogonality_error(torch.zeros(5, 4)).item() == 0.0


@pytest.mark.parametrize("k", [1, 3, 7])
def test_effective_rank_of_k_orthogonal_equal_norm_directions(k):
    g = torch.Generator().manual_seed(k)
    q, _ = torch.linalg.qr(torch.randn(16, k, generator=g))  # orthonormal columns
    z = q.T.repeat(5, 1) * (torch.rand(5 * k, 1, generator=g) + 0.5)  # scale is normalised away
    assert effective_rank(z).item() == pytest.approx(k, rel=1e-6)


def test_effective_rank_of_zero_features_is_zero():
    assert effective_rank(torch.zeros(4, 6)).item() == 0.0


@pytest.mark.parametrize("kind", ["sparse", "dense"])
def test_streaming_equals_one_shot(kind):
    z, y = DATA[kind]()
    orth, rank = OrthogonalityError(10), EffectiveRank(10)
    for zb, _ in batches(z, y, [10, 1, 17, 20]):
        orth.update(zb)
        rank.update(zb)
    torch.testing.assert_close(orth.compute(), orthogonality_error(z), rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(rank.compute(), effective_rank(z), rtol=1e-5, atol=1e-7)


def test_metric_flags_and_validation():
    assert OrthogonalityError.higher_is_better is False
    assert EffectiveRank.higher_is_better is True
    for cls in (OrthogonalityError, EffectiveRank):
        assert cls.full_state_update is False
        with pytest.raises(ValueError, match="num_features"):
            cls(0)
        with pytest.raises(ValueError, match=r"z must have shape \[N, 3\], got \(2, 4\)"):
            cls(3).update(torch.ones(2, 4))
    with pytest.raises(ValueError, match="eps"):
        OrthogonalityError(3, eps=-1.0)


def test_orthogonality_error_of_one_hot_features_is_exactly_non_negative():
    """Total minus diagonal used to round to -3e-17 for exactly orthogonal columns."""
    z = torch.eye(7)[torch.arange(50) % 7] * torch.rand(50, 1).add(0.5)
    assert orthogonality_error(z).item() == 0.0
