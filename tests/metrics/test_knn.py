"""Weighted kNN against a brute-force python-loop reference."""

from __future__ import annotations

import math

import pytest
import torch

from ncl_lightning.metrics.functional import weighted_knn_predict


def ref_knn(query, bank, labels, num_classes, k, temperature):
    out = []
    for q in query.tolist():
        qn = math.sqrt(sum(v * v for v in q))
        sims = []
        for i, b in enumerate(bank.tolist()):
            bn = math.sqrt(sum(v * v for v in b))
            sims.append((sum(x * y for x, y in zip(q, b, strict=True)) / (qn * bn), i))
        sims.sort(reverse=True)
        scores = [0.0] * num_classes
        for sim, i in sims[: min(k, len(sims))]:
            scores[int(labels[i])] += math.exp(sim / temperature)
        out.append(scores)
    return torch.tensor(out, dtype=torch.float64)


@pytest.mark.parametrize(
    ("k", "temperature", "chunk_size"), [(5, 0.07, 1024), (3, 0.5, 4), (100, 0.1, 3)]
)
def test_matches_brute_force(k, temperature, chunk_size):
    g = torch.Generator().manual_seed(0)
    query = torch.randn(11, 6, generator=g, dtype=torch.float64)
    bank = torch.randn(30, 6, generator=g, dtype=torch.float64)
    labels = torch.randint(0, 4, (30,), generator=g)
    got = weighted_knn_predict(
        query, bank, labels, 4, k=k, temperature=temperature, chunk_size=chunk_size
    )
    torch.testing.assert_close(got, ref_knn(query, bank, labels, 4, k, temperature))


def test_float32_and_prediction_on_clusters():
    g = torch.Generator().manual_seed(1)
    centres = torch.randn(3, 16, generator=g) * 5
    labels = torch.arange(3).repeat_interleave(20)
    bank = centres[labels] + torch.randn(60, 16, generator=g)
    query = centres + 0.1 * torch.randn(3, 16, generator=g)
    scores = weighted_knn_predict(query, bank, labels, num_classes=3, k=10)
    assert scores.dtype == torch.float32 and scores.shape == (3, 3)
    assert scores.argmax(1).tolist() == [0, 1, 2]


def test_half_inputs_upcast_and_empty_query():
    bank = torch.randn(5, 4).half()
    labels = torch.tensor([0, 1, 0, 1, 1])
    assert weighted_knn_predict(torch.randn(2, 4).half(), bank, labels, 2).dtype == torch.float32
    assert weighted_knn_predict(torch.randn(0, 4), bank.float(), labels, 2).shape == (0, 2)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"k": 0}, "k must"),
        ({"temperature": 0.0}, "temperature"),
        ({"num_classes": 1}, r"bank_labels must hold values in \[0, 1\), got values from 0 to 1"),
        ({"chunk_size": 0}, "chunk_size"),
    ],
)
def test_rejects_bad_args(kwargs, match):
    args = {"num_classes": 2, **kwargs}
    with pytest.raises(ValueError, match=match):
        weighted_knn_predict(
            torch.randn(2, 3), torch.randn(4, 3), torch.tensor([0, 1, 1, 0]), **args
        )


def test_rejects_shape_mismatch():
    with pytest.raises(ValueError, match="share D"):
        weighted_knn_predict(
            torch.randn(2, 3), torch.randn(4, 5), torch.zeros(4, dtype=torch.long), 2
        )
