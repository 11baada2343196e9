"""The releases' variants of our metrics against slow, obvious references written here.

The NCL release (``PKU-ML/non_neg``) and the BayesNCL release (``Cui-Peng-624/BayesNCL``) log
quantities under our names that are computed differently (docs/metrics.md, "Compare with
the paper"): the spectral entropy as ``effective_rank``, other reductions of ``|G − I|`` as
``orthogonality``, a sparsity on unnormalised features, retrieval by Euclidean distance.
Each reference below follows the release's definition step by step, in python floats or
float64, on constructed cases: one-hot (identity-like) features, random non-negative
features with dead dims, signed dense features.
"""

from __future__ import annotations

import math

import pytest
import torch

from ncl_lightning import metrics
from ncl_lightning.metrics import functional as F
from tests.metrics.reference import (
    batches,
    dense_features,
    normalized_rows,
    one_hot_features,
    sparse_features,
)

CASES = {
    "sparse": sparse_features,
    "dense": dense_features,
    "one_hot": one_hot_features,
}


def _columns(rows: list[list[float]]) -> list[list[float]]:
    return [list(col) for col in zip(*rows, strict=True)]


# -- spectral entropy ------------------------------------------------------------------------


def ref_spectral_entropy(z: torch.Tensor, offset: float = 0.0) -> float:
    """``−Σ p ln(p + offset)``, ``p = s / Σ s`` over the singular values of ``ẑ``."""
    z_hat = torch.tensor(normalized_rows(z), dtype=torch.float64)
    s = torch.linalg.svdvals(z_hat).tolist()
    s = [v if v > 1e-10 * max(s) else 0.0 for v in s]
    total = sum(s)
    return -sum((v / total) * math.log(v / total + offset) for v in s if v > 0)


@pytest.mark.parametrize("case", sorted(CASES))
def test_spectral_entropy_is_ln_of_effective_rank(case: str) -> None:
    z, _ = CASES[case]()
    expected = ref_spectral_entropy(z)
    assert F.spectral_entropy(z).item() == pytest.approx(expected, rel=1e-5, abs=1e-6)
    assert F.spectral_entropy(z).item() == pytest.approx(math.log(F.effective_rank(z).item()))
    metric = metrics.SpectralEntropy(z.shape[1])
    for part, _ in batches(z, torch.zeros(len(z)), [len(z) // 3, len(z) - len(z) // 3]):
        metric.update(part)
    assert metric.compute().item() == pytest.approx(expected, rel=1e-5, abs=1e-6)
    # The releases' erank adds 1e-6 inside the log: at most min(N, d) · 1e-6 apart.
    release = ref_spectral_entropy(z, offset=1e-6)
    assert abs(F.spectral_entropy(z).item() - release) <= min(z.shape) * 1e-6 + 1e-6  # float32


def test_spectral_entropy_of_k_equal_orthogonal_directions_is_ln_k() -> None:
    z, _ = one_hot_features(n=40, num_classes=5)  # 5 live one-hot dims, balanced
    z = (z > 0).float()
    assert F.spectral_entropy(z).item() == pytest.approx(math.log(5), rel=1e-6)
    assert F.spectral_entropy(torch.zeros(4, 3)).item() == 0.0
    assert F.spectral_entropy_from_gram(torch.zeros(3, 3)).item() == 0.0


# -- orthogonality: the releases' reductions of |G − I| ---------------------------------------


def ref_abs_cosine_minus_identity(z: torch.Tensor, eps: float = 1e-5) -> list[list[float]]:
    """``|G − I|`` over the active columns of ``ẑ`` (each normalised over samples)."""
    rows = normalized_rows(z)
    cols = [c for c in _columns(rows) if any(abs(v) > eps for v in c)]
    unit = []
    for col in cols:
        norm = math.sqrt(sum(v * v for v in col))
        unit.append([v / norm for v in col])
    return [
        [
            abs(sum(a * b for a, b in zip(ci, cj, strict=True)) - (i == j))
            for j, cj in enumerate(unit)
        ]
        for i, ci in enumerate(unit)
    ]


@pytest.mark.parametrize("case", sorted(CASES))
def test_orthogonality_reductions_match_the_release_definitions(case: str) -> None:
    z, _ = CASES[case]()
    deviation = ref_abs_cosine_minus_identity(z)
    m = len(deviation)
    entries = sorted(v for row in deviation for v in row)
    mean_all = sum(entries) / m**2
    median_all = entries[(len(entries) - 1) // 2]  # torch.median: the lower middle value
    off_diagonal = sum(entries) / (m * (m - 1))
    expected = {
        "off_diagonal": off_diagonal,
        "mean_all_entries": mean_all,
        "median_all_entries": median_all,
    }
    for reduction, value in expected.items():
        got = F.orthogonality_error(z, reduction=reduction).item()
        assert got == pytest.approx(value, rel=1e-5, abs=1e-7), reduction
        metric = metrics.OrthogonalityError(z.shape[1], reduction=reduction)
        for part, _ in batches(z, torch.zeros(len(z)), [7, len(z) - 7]):
            metric.update(part)
        assert metric.compute().item() == pytest.approx(value, rel=1e-5, abs=1e-7), reduction
    # The NCL training log's mean over all m² entries is ours times (m − 1)/m.
    assert mean_all == pytest.approx(off_diagonal * (m - 1) / m)


def test_orthogonality_reductions_of_one_hot_and_identical_columns() -> None:
    z, _ = one_hot_features()
    for reduction in F.ORTHOGONALITY_REDUCTIONS:
        assert F.orthogonality_error(z, reduction=reduction).item() == pytest.approx(0.0, abs=1e-12)
    same = torch.ones(5, 3)  # identical columns: |G − I| is 1 off the diagonal, 0 on it
    assert F.orthogonality_error(same, reduction="mean_all_entries").item() == pytest.approx(6 / 9)
    assert F.orthogonality_error(same, reduction="median_all_entries").item() == pytest.approx(1.0)
    with pytest.raises(ValueError, match="reduction must be one of 'off_diagonal'"):
        F.orthogonality_error(same, reduction="median")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="reduction must be one of"):
        metrics.OrthogonalityError(3, reduction="mean")  # type: ignore[arg-type]


# -- sparsity on unnormalised features (NCL main_eval) -----------------------------------------


def ref_unnormalized_sparsity(z: torch.Tensor, eps: float) -> float:
    """Mean over samples of ``#{j : |z_j| < eps} / d`` on the raw features."""
    rows = z.double().tolist()
    return sum(sum(abs(v) < eps for v in row) / len(row) for row in rows) / len(rows)


@pytest.mark.parametrize("case", sorted(CASES))
def test_unnormalized_sparsity_matches_main_eval(case: str) -> None:
    z, _ = CASES[case]()
    z = z * 0.05  # raw magnitudes around the 1e-2 threshold
    expected = ref_unnormalized_sparsity(z, 1e-2)
    assert F.sparsity(z, 1e-2, normalize=False).item() == pytest.approx(expected)
    metric = metrics.Sparsity(1e-2, normalize=False)
    for part, _ in batches(z, torch.zeros(len(z)), [10, len(z) - 10]):
        metric.update(part)
    assert metric.compute().item() == pytest.approx(expected)
    # Scale matters without normalisation, not with it.
    assert F.sparsity(z * 100, 1e-2, normalize=False).item() <= expected
    assert F.sparsity(z * 100).item() == pytest.approx(F.sparsity(z).item())


def test_identity_features_are_sparse_either_way() -> None:
    z = torch.eye(6)
    assert F.sparsity(z, 1e-2, normalize=False).item() == pytest.approx(5 / 6)
    assert F.zero_fraction(z * 1e-3, 1e-2, normalize=False).tolist() == [1.0] * 6


# -- retrieval with Euclidean distance (NCL main_eval) -----------------------------------------


def ref_euclidean_precision(z: torch.Tensor, labels: torch.Tensor, k: int, dims=None) -> float:
    """Rows normalised over all dims, dims kept as they are, k nearest by Euclidean distance."""
    rows = normalized_rows(z)
    if dims is not None:
        rows = [[row[j] for j in dims] for row in rows]
    n, hits = len(rows), 0
    for i in range(n):
        dist = [
            (sum((a - b) ** 2 for a, b in zip(rows[i], rows[j], strict=True)), j)
            for j in range(n)
            if j != i
        ]
        nearest = [j for _, j in sorted(dist)[:k]]
        hits += sum(int(labels[j]) == int(labels[i]) for j in nearest)
    return hits / (n * k)


def _distinct_features(n: int = 60, d: int = 12, seed: int = 3):
    g = torch.Generator().manual_seed(seed)
    z = torch.relu(torch.randn(n, d, generator=g)) + 1e-3 * torch.rand(n, d, generator=g)
    return z, torch.randint(0, 4, (n,), generator=g)  # no ties, no zero rows


def test_euclidean_retrieval_matches_main_eval_on_kept_dims() -> None:
    z, labels = _distinct_features()
    dims = [0, 3, 4, 7, 9]
    expected = ref_euclidean_precision(z, labels, 5, dims)
    got = F.retrieval_precision(z, labels, 5, dims=torch.tensor(dims), chunk_size=7,
                                distance="euclidean")  # fmt: skip
    assert got.item() == pytest.approx(expected)
    # All dims: unit rows, so the Euclidean ranking is the cosine one.
    full = F.retrieval_precision(z, labels, 5, distance="euclidean").item()
    assert full == pytest.approx(ref_euclidean_precision(z, labels, 5))
    assert full == pytest.approx(F.retrieval_precision(z, labels, 5).item())


def test_euclidean_retrieval_ranks_near_collapsed_rows_exactly() -> None:
    """Rows that differ by 1e-4 (an early checkpoint's features): the float32 expansion
    2 a·b − ‖b‖² would misrank them; the reference subtracts coordinates."""
    g = torch.Generator().manual_seed(5)
    z = torch.rand(1, 16, generator=g) + 1e-4 * torch.randn(80, 16, generator=g)
    labels = torch.randint(0, 4, (80,), generator=g)
    dims = [1, 2, 6, 11]
    got = F.retrieval_precision(z, labels, 5, dims=torch.tensor(dims), distance="euclidean")
    assert got.item() == pytest.approx(ref_euclidean_precision(z, labels, 5, dims))


def test_euclidean_retrieval_metric_selects_by_ea_of_the_stored_features() -> None:
    z, labels = _distinct_features(seed=4)
    metric = metrics.RetrievalPrecision(k=4, num_selected=6, distance="euclidean")
    for part, lab in batches(z, labels, [25, 35]):
        metric.update(part, lab)
    dims = F.select_by_expected_activation(F.expected_activation(z), 6).tolist()
    expected = ref_euclidean_precision(z, labels, 4, dims)
    assert metric.compute().item() == pytest.approx(expected)
    assert metric.precision("euclidean").item() == pytest.approx(expected)
    cosine = metrics.RetrievalPrecision(k=4, num_selected=6)
    cosine.update(z, labels)
    assert metric.precision("cosine").item() == pytest.approx(cosine.compute().item())
    with pytest.raises(ValueError, match="distance must be one of 'cosine', 'euclidean'"):
        metrics.RetrievalPrecision(distance="l1")  # type: ignore[arg-type]


def test_no_variant_returns_nan_on_constructed_cases() -> None:
    for make in CASES.values():
        z, labels = make()
        values = [
            F.spectral_entropy(z),
            F.orthogonality_error(z, reduction="mean_all_entries"),
            F.orthogonality_error(z, reduction="median_all_entries"),
            F.sparsity(z, 1e-2, normalize=False),
            F.retrieval_precision(z, labels, 3, distance="euclidean"),
        ]
        assert all(torch.isfinite(v).item() for v in values)


def test_mean_activation_entropy_against_a_slow_reference() -> None:
    """``p_i(c) ∝ (Σ_{x∈c} |ẑ_i(x)|) / N_c``: on an unbalanced split it differs from the
    summed weighting, on a balanced one it is the same; the metric streams to the value."""
    from ncl_lightning.metrics import SemanticEntropy
    from ncl_lightning.metrics.functional import semantic_entropy

    gen = torch.Generator().manual_seed(3)
    z = torch.rand(30, 4, generator=gen)
    labels = torch.tensor([0] * 20 + [1] * 7 + [2] * 3)
    zn = z / z.norm(dim=1, keepdim=True)
    entropies = []
    for i in range(4):
        means = [float(zn[labels == c, i].abs().sum()) / int((labels == c).sum()) for c in range(3)]
        p = [m / sum(means) for m in means]
        entropies.append(-sum(q * math.log(q) for q in p if q > 1e-5))
    expected = sum(entropies) / 4
    got = semantic_entropy(z, labels, 3, weighting="mean_activation")
    assert float(got) == pytest.approx(expected, rel=1e-5)
    assert float(semantic_entropy(z, labels, 3)) != pytest.approx(expected, rel=1e-3)
    metric = SemanticEntropy(4, 3, weighting="mean_activation")
    metric.update(z[:13], labels[:13])
    metric.update(z[13:], labels[13:])
    assert float(metric.compute()) == pytest.approx(expected, rel=1e-5)
    balanced = torch.arange(30) % 3
    assert float(semantic_entropy(z, balanced, 3, weighting="mean_activation")) == pytest.approx(
        float(semantic_entropy(z, balanced, 3)), rel=1e-5
    )
