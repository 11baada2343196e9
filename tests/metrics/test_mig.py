"""MIG against a python-loop reference, constructed extremes and the streaming metric."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch

from ncl_lightning.metrics.functional.mig import (
    discrete_mutual_info,
    histogram_discretize,
    mutual_information_gap,
)
from ncl_lightning.metrics.mig import MutualInformationGap

SIZES = (3, 6, 40, 32, 32)  # dSprites factor sizes


def ref_discretize(column, num_bins):
    low, high = min(column), max(column)
    edges = [low + (high - low) * b / num_bins for b in range(num_bins)]
    return [sum(1 for e in edges if e <= v) for v in column]  # np.digitize, 1-based


def ref_mi(xs, ys):
    n = len(xs)
    joint, cx, cy = Counter(zip(xs, ys, strict=True)), Counter(xs), Counter(ys)
    return sum(c / n * math.log(c * n / (cx[x] * cy[y])) for (x, y), c in joint.items())


def ref_mig(codes, factors, num_bins=20):
    code_cols = [ref_discretize(list(col), num_bins) for col in zip(*codes.tolist(), strict=True)]
    gaps = []
    for factor in zip(*factors.tolist(), strict=True):
        entropy = ref_mi(factor, factor)
        if entropy == 0:
            continue
        mis = sorted((ref_mi(col, factor) for col in code_cols), reverse=True)
        gaps.append(((mis[0] - mis[1]) if len(mis) > 1 else mis[0]) / entropy)
    return sum(gaps) / len(gaps)


def random_factors(n, sizes=SIZES, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.stack([torch.randint(0, s, (n,), generator=g) for s in sizes], dim=1)


def correlated_codes(factors, d=4, seed=0):
    """Codes that partly follow the factors, so the MIs and gaps are non-trivial."""
    g = torch.Generator().manual_seed(seed)
    noise = torch.randn(factors.shape[0], d, generator=g, dtype=torch.float64)
    codes = noise.clone()
    codes[:, 0] += 2.0 * factors[:, 0]
    codes[:, 1] += 0.3 * factors[:, 1] + 0.5 * factors[:, 0]
    return codes


@pytest.mark.parametrize("num_bins", [1, 5, 20])
@pytest.mark.parametrize("d", [1, 4])
def test_matches_reference(num_bins, d):
    factors = random_factors(300, sizes=(3, 6, 7), seed=d)
    factors[:, 2] = 4  # constant factor: skipped
    codes = correlated_codes(factors, d=4, seed=num_bins)[:, :d]
    got = mutual_information_gap(codes, factors, num_bins)
    assert got.dtype == torch.float64 and got.ndim == 0
    assert got.item() == pytest.approx(ref_mig(codes, factors, num_bins), rel=1e-9, abs=1e-12)


def test_discretize_and_mi_match_reference():
    codes = correlated_codes(random_factors(200, sizes=(3, 5), seed=1), d=3, seed=2)
    codes[:, 2] = 1.5  # constant code: one bin, zero MI
    binned = histogram_discretize(codes, 7)
    for j in range(3):
        assert [b + 1 for b in binned[:, j].tolist()] == ref_discretize(codes[:, j].tolist(), 7)
    factors = random_factors(200, sizes=(3, 5), seed=1) - 2  # any label values work
    mi = discrete_mutual_info(binned, factors)
    assert mi.shape == (3, 2) and mi[2].abs().max() < 1e-12
    for j in range(3):
        for k in range(2):
            want = ref_mi(binned[:, j].tolist(), factors[:, k].tolist())
            assert mi[j, k].item() == pytest.approx(want, rel=1e-9, abs=1e-12)


def test_identity_code_has_mig_near_one():
    # One dim per factor. 40 bins give every factor value its own bin; with the default 20
    # the 40-value orientation and 32-value positions share bins and MIG is only about 0.9.
    factors = random_factors(20_000)
    codes = factors.double() + 0.0
    assert mutual_information_gap(codes, factors, num_bins=40).item() > 0.9
    assert 0.85 < mutual_information_gap(codes, factors).item() < 0.95


def test_random_code_has_mig_near_zero():
    factors = random_factors(5000, seed=1)
    codes = torch.randn(5000, 5, generator=torch.Generator().manual_seed(2))
    assert mutual_information_gap(codes, factors).item() < 0.05


def test_metric_streams_like_functional():
    factors = random_factors(1000, seed=3)
    codes = correlated_codes(factors, d=6, seed=3).float()
    metric = MutualInformationGap(num_bins=20)
    assert metric.higher_is_better is True and metric.full_state_update is False
    for start in range(0, 1000, 128):
        metric.update(codes[start : start + 128], factors[start : start + 128])
    got = metric.compute()
    assert got.item() == pytest.approx(mutual_information_gap(codes, factors).item(), rel=1e-12)
    assert 0.0 < got.item() < 1.0


def test_invalid_arguments():
    codes, factors = torch.randn(10, 3), torch.zeros(10, 2, dtype=torch.long)
    with pytest.raises(ValueError, match="num_bins"):
        mutual_information_gap(codes, factors, num_bins=0)
    with pytest.raises(ValueError, match="num_bins"):
        MutualInformationGap(num_bins=0)
    with pytest.raises(ValueError, match="factors must be integer"):
        mutual_information_gap(codes, factors.float())
    with pytest.raises(ValueError, match="rows"):
        mutual_information_gap(codes, factors[:5])
    with pytest.raises(ValueError, match="codes must have shape"):
        mutual_information_gap(codes[:, 0], factors)
    with pytest.raises(ValueError, match="finite"):
        mutual_information_gap(torch.full((10, 3), math.nan), factors)


@pytest.mark.filterwarnings("ignore:The ``compute`` method")
def test_compute_before_update_raises():
    with pytest.raises(ValueError, match="before any update"):
        MutualInformationGap().compute()
