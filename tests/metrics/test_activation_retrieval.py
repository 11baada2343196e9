"""Expected activation, EA feature selection and retrieval precision vs loop references."""

from __future__ import annotations

import pytest
import torch

from ncl_lightning.metrics import ExpectedActivation, RetrievalPrecision
from ncl_lightning.metrics.functional import (
    expected_activation,
    retrieval_precision,
    select_by_expected_activation,
)
from tests.metrics.reference import batches, dense_features, normalized_rows, sparse_features


def ref_expected_activation(z):
    rows = normalized_rows(z)
    return [sum(row[j] for row in rows) / len(rows) for j in range(len(rows[0]))]


def ref_retrieval(z, labels, k, dims=None):
    if dims is not None:
        z = z[:, dims]
    rows, ys = normalized_rows(z), labels.tolist()
    k = min(k, len(rows) - 1)
    total = 0.0
    for q, query in enumerate(rows):
        sims = [
            (sum(a * b for a, b in zip(query, other, strict=True)), i)
            for i, other in enumerate(rows)
            if i != q
        ]
        sims.sort(key=lambda t: -t[0])
        # Retrieval breaks ties arbitrarily: the test data must have none at the cut.
        assert k == len(sims) or sims[k - 1][0] != sims[k][0], "tie at the k-th neighbour"
        total += sum(ys[i] == ys[q] for _, i in sims[:k]) / k
    return total / len(rows)


def retrieval_features(n: int = 48, d: int = 10, seed: int = 3):
    """Sparse non-negative features with exact zeros and a dead dim, but no tied neighbours."""
    g = torch.Generator().manual_seed(seed)
    z = torch.relu(torch.randn(n, d, generator=g) + 0.4)
    z[:, 2] = 0.0
    return z, torch.randint(0, 4, (n,), generator=g)


DATA = {"sparse": sparse_features, "dense": dense_features}
RETRIEVAL_DATA = {"sparse": retrieval_features, "dense": dense_features}


@pytest.mark.parametrize("kind", ["sparse", "dense"])
def test_expected_activation_matches_reference(kind):
    z, _ = DATA[kind]()
    expected = torch.tensor(ref_expected_activation(z), dtype=torch.float32)
    torch.testing.assert_close(expected_activation(z), expected, rtol=1e-5, atol=1e-7)


def test_select_by_expected_activation():
    ea = torch.tensor([0.1, 0.5, 0.0, 0.3, 0.2])
    assert select_by_expected_activation(ea, 3).tolist() == [1, 3, 4]
    assert select_by_expected_activation(ea, 5).dtype == torch.long
    with pytest.raises(ValueError, match=r"k must be in \[1, 5\], got 6"):
        select_by_expected_activation(ea, 6)
    with pytest.raises(ValueError, match="k must be an integer >= 1, got 0"):
        select_by_expected_activation(ea, 0)


@pytest.mark.parametrize("kind", ["sparse", "dense"])
@pytest.mark.parametrize(("k", "chunk_size"), [(1, 1024), (10, 7), (100, 5)])
def test_retrieval_matches_reference(kind, k, chunk_size):
    z, y = RETRIEVAL_DATA[kind]()
    got = retrieval_precision(z, y, k, chunk_size=chunk_size)
    assert got.item() == pytest.approx(ref_retrieval(z, y, k), rel=1e-6)


def test_retrieval_on_selected_dims():
    z, y = retrieval_features()
    dims = select_by_expected_activation(expected_activation(z), 7)
    got = retrieval_precision(z, y, 5, dims=dims, chunk_size=9)
    assert got.item() == pytest.approx(ref_retrieval(z, y, 5, dims.tolist()), rel=1e-6)


def test_retrieval_constructed_and_validation():
    labels = torch.arange(12) % 3
    z = torch.nn.functional.one_hot(labels, 3).float() + 0.01 * torch.rand(12, 3)
    assert retrieval_precision(z, labels, k=3).item() == pytest.approx(1.0)
    with pytest.raises(ValueError, match="at least 2"):
        retrieval_precision(z[:1], labels[:1])
    with pytest.raises(ValueError, match="labels must have shape"):
        retrieval_precision(z, labels[:3])
    with pytest.raises(ValueError, match="k must be"):
        retrieval_precision(z, labels, k=0)


def test_streaming_metrics_equal_one_shot():
    z, y = sparse_features()
    ea, retrieval = ExpectedActivation(10), RetrievalPrecision(k=5)
    selected = RetrievalPrecision(k=5, num_selected=4, chunk_size=8)
    for zb, yb in batches(z, y, [10, 1, 17, 20]):
        ea.update(zb)
        retrieval.update(zb, yb)
        selected.update(zb, yb)
    torch.testing.assert_close(ea.compute(), expected_activation(z), rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(retrieval.compute(), retrieval_precision(z, y, 5))
    dims = select_by_expected_activation(expected_activation(z), 4)
    torch.testing.assert_close(selected.compute(), retrieval_precision(z, y, 5, dims=dims))


@pytest.mark.filterwarnings("ignore:The ``compute`` method")
def test_metric_flags_and_validation():
    assert RetrievalPrecision.higher_is_better is True
    assert ExpectedActivation.full_state_update is False
    assert RetrievalPrecision.full_state_update is False
    with pytest.raises(ValueError, match="num_selected"):
        RetrievalPrecision(num_selected=0)
    with pytest.raises(ValueError, match="before any update"):
        RetrievalPrecision().compute()
    with pytest.raises(ValueError, match=r"z must have shape \[N, 3\], got \(2, 4\)"):
        ExpectedActivation(3).update(torch.ones(2, 4))
