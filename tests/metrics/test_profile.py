"""FeatureProfile and dimension_profile against per-dimension loops written out here."""

from __future__ import annotations

import math

import pytest
import torch

from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.metrics import FeatureProfile
from ncl_lightning.metrics.functional import semantic_consistency, semantic_entropy, sparsity
from ncl_lightning.metrics.functional.profile import dimension_profile, merge_top_k


def _features(n: int = 90, d: int = 7, c: int = 4, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    z = torch.relu(torch.randn(n, d, generator=g))
    z[:, 3] = 0.0  # a dead dimension
    z[:10, 5] = 2.0  # ties: ten samples share the largest value of dim 5 (before norming)
    labels = torch.randint(0, c, (n,), generator=g)
    return z, labels, c


def _reference(z, labels, c, eps, k):
    """Per dimension, one sample at a time."""
    n, d = z.shape
    rows = []
    for i in range(d):
        zh = [float(z[x, i] / z[x].norm()) if z[x].norm() > 0 else 0.0 for x in range(n)]
        counts = [0] * c
        for x in range(n):
            if abs(zh[x]) > eps:
                counts[int(labels[x])] += 1
        total = sum(counts)
        # top-k by value, ties to the smaller index
        order = sorted(range(n), key=lambda x: (-zh[x], x))[:k]
        rows.append({
            "ea": sum(zh) / n,
            "freq": total / n,
            "counts": counts,
            "consistency": 100 * max(counts) / total if total else math.nan,
            "majority": counts.index(max(counts)) if total else -1,
            "top": order,
        })  # fmt: skip
    return rows


def test_profile_matches_a_per_dimension_loop() -> None:
    z, labels, c = _features()
    p = dimension_profile(z, labels, c, eps=1e-5, top_k=5)
    for i, ref in enumerate(_reference(z, labels, c, 1e-5, 5)):
        assert float(p.expected_activation[i]) == pytest.approx(ref["ea"], abs=1e-6)
        assert float(p.frequency[i]) == pytest.approx(ref["freq"])
        assert p.class_counts[i].tolist() == ref["counts"]
        assert int(p.majority[i]) == ref["majority"]
        if ref["freq"] == 0:
            assert bool(p.dead[i]) and math.isnan(float(p.consistency[i]))
        else:
            assert float(p.consistency[i]) == pytest.approx(ref["consistency"])
            assert p.top_index[:, i].tolist() == ref["top"], i
    assert int(p.num_samples) == len(z)


def test_profile_sums_give_the_project_metrics() -> None:
    z, labels, c = _features(seed=1)
    p = dimension_profile(z, labels, c)
    live = ~p.dead
    assert 1 - float(p.frequency.mean()) == pytest.approx(float(sparsity(z)), abs=1e-6)
    assert float(p.consistency[live].mean()) == pytest.approx(
        float(semantic_consistency(z, labels, c)), rel=1e-5
    )
    mass = p.class_mass[live] / p.class_mass[live].sum(1, keepdim=True)
    entropy = -(mass * mass.clamp_min(1e-300).log()).where(mass > 1e-5, 0).sum(1).mean()
    assert float(entropy) == pytest.approx(float(semantic_entropy(z, labels, c)), rel=1e-5)


@pytest.mark.parametrize("batch", [1, 7, 32, 90])
def test_streaming_in_any_batches_equals_one_shot(batch: int) -> None:
    z, labels, c = _features(seed=2)
    whole = dimension_profile(z, labels, c, top_k=6)
    metric = FeatureProfile(z.shape[1], c, top_k=6)
    for start in range(0, len(z), batch):
        stop = min(start + batch, len(z))
        metric.update(z[start:stop], labels[start:stop], torch.arange(start, stop))
    streamed = metric.compute()
    for name, a, b in zip(whole._fields, whole, streamed, strict=True):
        assert torch.allclose(a.double(), b.double(), equal_nan=True), name


def test_two_shards_merge_to_the_whole_split_in_any_order() -> None:
    """What the DDP reduction does (sum the sums, concatenate and re-take the top-k)."""
    z, labels, c = _features(seed=3)
    whole = dimension_profile(z, labels, c, top_k=4)
    shards = []
    for rank in (1, 0):  # the rank-1 shard first: ties still go to the smaller index
        index = torch.arange(rank, len(z), 2)
        shards.append(dimension_profile(z[index], labels[index], c, top_k=4, sample_index=index))
    values, index = merge_top_k(
        torch.cat([s.top_values for s in shards]), torch.cat([s.top_index for s in shards]), 4
    )
    assert torch.equal(index, whole.top_index)
    assert torch.equal(values, whole.top_values)
    assert torch.equal(shards[0].class_counts + shards[1].class_counts, whole.class_counts)


def test_fewer_samples_than_slots_leave_empty_slots() -> None:
    z, labels, c = _features(n=3)
    p = dimension_profile(z, labels, c, top_k=5)
    assert (p.top_index[3:] == -1).all() and torch.isinf(p.top_values[3:]).all()


def test_memory_does_not_grow_with_the_split() -> None:
    metric = FeatureProfile(16, 3, top_k=4)
    sizes = []
    for seed in range(3):
        z, labels, _ = _features(n=200, d=16, c=3, seed=seed)
        metric.update(z, labels, torch.arange(seed * 200, (seed + 1) * 200))
        sizes.append(sum(getattr(metric, s).numel() for s in metric._defaults))
    assert sizes[0] == sizes[-1] == 1 + 16 + 2 * 16 * 3 + 2 * 4 * 16


def test_bad_input_is_named() -> None:
    with pytest.raises(ConfigError, match="top_k"):
        FeatureProfile(4, 2, top_k=0)
    with pytest.raises(ConfigError, match=r"z must have shape \[B, 4\], got \(3, 5\)"):
        FeatureProfile(4, 2).update(torch.ones(3, 5), torch.zeros(3), torch.arange(3))
    with pytest.raises(ConfigError, match="sample_index"):
        FeatureProfile(4, 2).update(torch.ones(3, 4), torch.zeros(3), torch.arange(2))


def test_forward_keeps_k_slots_and_the_whole_split_profile() -> None:
    z, labels, c = _features(seed=4)
    metric = FeatureProfile(z.shape[1], c, top_k=3)
    for start in range(0, len(z), 10):
        metric(
            z[start : start + 10],
            labels[start : start + 10],
            torch.arange(start, start + 10)[: len(z[start : start + 10])],
        )
    assert metric.top_index.shape == (3, z.shape[1])  # bounded, whatever the number of calls
    assert torch.equal(
        metric.compute().top_index, dimension_profile(z, labels, c, top_k=3).top_index
    )
