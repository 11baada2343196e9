"""Dictionary recovery against a python-loop reference and constructed encoders."""

from __future__ import annotations

import math
import statistics

import pytest
import torch

from ncl_lightning.data.sparse_coding import random_dictionary
from ncl_lightning.metrics.dictionary import DictionaryRecovery
from ncl_lightning.metrics.functional.dictionary import (
    dictionary_atom_scores,
    dictionary_recovery,
)


def ref_scores(weight, dictionary):
    rows, cols = weight.tolist(), dictionary.T.tolist()
    scores = []
    for col in cols:
        best = 0.0
        for row in rows:
            dot = sum(a * b for a, b in zip(row, col, strict=True))
            norm = math.sqrt(sum(a * a for a in row)) * math.sqrt(sum(b * b for b in col))
            best = max(best, abs(dot) / norm)
        scores.append(best)
    return scores


def _dictionary(p=50, d=10, seed=0):
    return random_dictionary(p, d, torch.Generator().manual_seed(seed))


def test_permuted_sign_flipped_dictionary_is_recovered():
    m = _dictionary()
    g = torch.Generator().manual_seed(1)
    perm = torch.randperm(10, generator=g)
    signs = torch.randint(0, 2, (10, 1), generator=g).float() * 2 - 1
    scale = torch.rand(10, 1, generator=g) + 0.5
    weight = (m.T[perm] * signs * scale).contiguous()
    extra = torch.randn(5, 50, generator=g)  # more rows than atoms is allowed
    for w in (weight, torch.cat([extra, weight])):
        stats = dictionary_recovery(w, m)
        for key in ("max", "median", "min"):
            assert stats[key].item() == pytest.approx(1.0, abs=1e-5)
    assert torch.allclose(dictionary_atom_scores(weight, m), torch.ones(10), atol=1e-5)


def test_random_encoder_is_poor():
    m = _dictionary()
    weight = torch.randn(10, 50, generator=torch.Generator().manual_seed(2))
    stats = dictionary_recovery(weight, m)
    assert stats["median"].item() < 0.7
    assert stats["min"] <= stats["median"] <= stats["max"]


@pytest.mark.parametrize(("m_rows", "p", "d"), [(10, 50, 10), (7, 12, 5), (3, 8, 8)])
def test_matches_reference_loop(m_rows, p, d):
    g = torch.Generator().manual_seed(m_rows + p + d)
    weight = torch.randn(m_rows, p, generator=g)
    dictionary = torch.randn(p, d, generator=g)  # not orthonormal: cosines still defined
    ref = ref_scores(weight, dictionary)
    got = dictionary_atom_scores(weight, dictionary)
    assert got.tolist() == pytest.approx(ref, rel=1e-5)
    stats = dictionary_recovery(weight, dictionary)
    assert stats["max"].item() == pytest.approx(max(ref), rel=1e-5)
    assert stats["median"].item() == pytest.approx(statistics.median(ref), rel=1e-5)
    assert stats["min"].item() == pytest.approx(min(ref), rel=1e-5)


def test_zero_rows_have_zero_cosine():
    m = _dictionary(8, 3)
    weight = torch.zeros(2, 8)
    assert dictionary_atom_scores(weight, m).tolist() == [0.0, 0.0, 0.0]


def test_shape_errors():
    m = _dictionary(8, 3)
    with pytest.raises(ValueError, match="weight must have shape"):
        dictionary_recovery(torch.randn(4, 7), m)
    with pytest.raises(ValueError, match="weight must have shape"):
        dictionary_recovery(torch.randn(8), m)
    with pytest.raises(ValueError, match="dictionary must have shape"):
        dictionary_recovery(torch.randn(4, 8), torch.randn(8))
    with pytest.raises(ValueError, match="dictionary must have shape"):
        DictionaryRecovery(torch.randn(8))
    with pytest.raises(ValueError, match="weight must have shape"):
        DictionaryRecovery(m).update(torch.randn(4, 7))


@pytest.mark.filterwarnings("ignore:The ``compute`` method")
def test_metric_equals_functional_and_keeps_latest_weight():
    m = _dictionary()
    g = torch.Generator().manual_seed(3)
    w1, w2 = torch.randn(10, 50, generator=g), m.T.clone()
    metric = DictionaryRecovery(m)
    assert DictionaryRecovery.higher_is_better is True
    metric.update(w1)
    got = metric.compute()
    want = dictionary_recovery(w1, m)
    assert got.keys() == want.keys()
    for key in want:
        assert torch.equal(got[key], want[key])

    batch_value = metric(w2)  # forward: value of w2, state keeps the latest weight
    assert batch_value["min"].item() == pytest.approx(1.0, abs=1e-5)
    assert torch.equal(metric.weight, w2)
    assert metric.compute()["min"].item() == pytest.approx(1.0, abs=1e-5)

    metric.reset()
    assert "dictionary" not in metric.state_dict()
    assert torch.equal(metric.dictionary, m)
    with pytest.raises(RuntimeError, match="before update"):
        metric.compute()
