"""SEPIN@k: the vectorised estimator against a loop of InfoNCE calls on dropped columns."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from ncl_lightning.metrics.functional.sepin import (
    sepin_at_k,
    sepin_per_dimension,
    sepin_per_dimension_loop,
)
from ncl_lightning.metrics.sepin import SEPIN


def ref_info_nce(z1, z2, tau):
    """Plain NT-Xent, written out: mean over 2B queries of -log softmax at the other view."""
    z = F.normalize(torch.cat([z1, z2]), dim=1)
    n = z.shape[0]
    sim = z @ z.T / tau
    total = 0.0
    for a in range(n):
        pos = (a + n // 2) % n
        others = [sim[a, b] for b in range(n) if b != a]
        total += torch.logsumexp(torch.stack(others), 0) - sim[a, pos]
    return total / n


def ref_sepin(z1, z2, tau):
    """SEPIN_i = L(z with column i removed) - L(z), one column at a time."""
    d = z1.shape[1]
    base = ref_info_nce(z1, z2, tau)
    out = []
    for i in range(d):
        keep = [j for j in range(d) if j != i]
        out.append(ref_info_nce(z1[:, keep], z2[:, keep], tau) - base)
    return torch.stack(out)


def views(batch, d, seed, sparse, noise=0.3):
    g = torch.Generator().manual_seed(seed)
    z1 = torch.randn(batch, d, generator=g)
    z2 = z1 + noise * torch.randn(batch, d, generator=g)
    if sparse:
        z1, z2 = torch.relu(z1 - 0.5), torch.relu(z2 - 0.5)  # ~70 % exact zeros
        z1[0] = 0.0
        z1[0, 1] = 3.0  # one non-zero entry: dropping dim 1 leaves the zero vector
        z2[1] = 0.0  # an all-zero feature (cosine 0 with everything)
        z2[2, :] = 0.0
        z2[2, 0], z2[2, 1] = 5.0, 1e-2  # almost all mass in one dim, resolvable in float32
    return z1, z2


CASES = [
    (2, 3, 0.5, False),
    (8, 5, 0.2, False),
    (16, 33, 0.1, False),
    (32, 24, 0.5, True),
    (24, 40, 0.2, True),
    (48, 17, 0.05, True),
]


@pytest.mark.parametrize(("batch", "d", "tau", "sparse"), CASES)
def test_vectorised_matches_loop(batch, d, tau, sparse):
    z1, z2 = views(batch, d, seed=batch + d, sparse=sparse)
    loop = sepin_per_dimension_loop(z1, z2, tau)
    fast = sepin_per_dimension(z1, z2, tau)
    assert fast.shape == (d,)
    torch.testing.assert_close(fast, loop, rtol=0, atol=1e-5)
    # Small chunks and float64 give the same numbers.
    torch.testing.assert_close(
        sepin_per_dimension(z1, z2, tau, chunk_size=2), loop, rtol=0, atol=1e-5
    )
    loop64 = sepin_per_dimension_loop(z1.double(), z2.double(), tau)
    torch.testing.assert_close(sepin_per_dimension(z1.double(), z2.double(), tau), loop64)


@pytest.mark.parametrize("sparse", [False, True])
def test_loop_matches_written_out_definition(sparse):
    z1, z2 = views(6, 5, seed=3, sparse=sparse)
    z1, z2 = z1.double(), z2.double()
    torch.testing.assert_close(sepin_per_dimension_loop(z1, z2, 0.2), ref_sepin(z1, z2, 0.2))


def test_single_entry_row_becomes_zero_vector():
    # Row 0 of view 1 is 3·e_1: without dim 1 it is the zero vector, whose cosine with every
    # other feature is 0, so its loss term is exactly log(2B - 1).
    z1, z2 = views(4, 6, seed=0, sparse=True)
    assert int((z1[0] != 0).sum()) == 1
    torch.testing.assert_close(
        sepin_per_dimension(z1, z2, 0.2), sepin_per_dimension_loop(z1, z2, 0.2), rtol=0, atol=1e-5
    )
    # One dimension: every leave-one-out feature is zero, all logits 0.
    one = sepin_per_dimension(z1[:, :1] + 1.0, z2[:, :1] + 1.0, 0.2)
    base = sepin_per_dimension_loop(z1[:, :1] + 1.0, z2[:, :1] + 1.0, 0.2)
    torch.testing.assert_close(one, base)
    # All 2B = 8 features coincide (loss log 7) and all become zero (loss log 7 again).
    assert one.item() == pytest.approx(0.0, abs=1e-5)


def test_extreme_temperature_uses_shifted_logsumexp():
    # 1/τ = 200 overflows a plain exp in float32; the estimator must shift.
    z1, z2 = views(12, 9, seed=5, sparse=False, noise=0.05)
    fast = sepin_per_dimension(z1, z2, 0.005)
    assert torch.isfinite(fast).all()
    torch.testing.assert_close(fast, sepin_per_dimension_loop(z1, z2, 0.005), rtol=0, atol=2e-5)


def test_scale_invariant_and_half_precision():
    z1, z2 = views(10, 8, seed=1, sparse=True)
    per_dim = sepin_per_dimension(z1, z2, 0.2)
    torch.testing.assert_close(
        sepin_per_dimension(z1 * 1e3, z2 * 1e-2, 0.2), per_dim, atol=1e-5, rtol=0
    )
    half = sepin_per_dimension(z1.half(), z2.half(), 0.2)
    assert half.dtype == torch.float32
    torch.testing.assert_close(half, per_dim, atol=1e-2, rtol=0)


def test_sepin_at_k_is_mean_of_largest():
    g = torch.Generator().manual_seed(0)
    per_dim = torch.randn(37, generator=g)
    desc = sorted(per_dim.tolist(), reverse=True)
    out = sepin_at_k(per_dim, ks=(1, 10, 100, None, 5))
    assert list(out) == ["sepin@1", "sepin@10", "sepin@100", "sepin@all", "sepin@5"]
    assert out["sepin@1"].item() == pytest.approx(desc[0])
    assert out["sepin@10"].item() == pytest.approx(sum(desc[:10]) / 10)
    assert out["sepin@5"].item() == pytest.approx(sum(desc[:5]) / 5)
    # k > d uses all d dimensions.
    assert out["sepin@100"].item() == pytest.approx(sum(desc) / 37)
    assert out["sepin@all"].item() == pytest.approx(sum(desc) / 37)


def test_metric_streams_weighted_mean_of_batches():
    z1, z2 = views(50, 12, seed=7, sparse=True)
    metric = SEPIN(num_features=12, temperature=0.2, ks=(1, 3, None))
    weighted, total = torch.zeros(12), 0
    for a, b in zip(z1.split(16), z2.split(16), strict=True):  # batches 16, 16, 16, 2
        metric.update(a, b)
        weighted += a.shape[0] * sepin_per_dimension_loop(a, b, 0.2)
        total += a.shape[0]
    metric.update(z1[:0], z2[:0])  # an empty batch adds nothing
    expected = sepin_at_k(weighted / total, ks=(1, 3, None))
    got = metric.compute()
    assert list(got) == ["sepin@1", "sepin@3", "sepin@all"]
    for key, value in expected.items():
        assert got[key].item() == pytest.approx(value.item(), abs=1e-5)
    assert SEPIN.higher_is_better and not SEPIN.full_state_update


def test_metric_rank_merge_equals_one_process():
    # merge_state applies each state's dist_reduce_fx, as the DDP sync does across ranks.
    z1, z2 = views(40, 10, seed=2, sparse=True)
    one, rank0, rank1 = (SEPIN(10, 0.5) for _ in range(3))
    for a, b in zip(z1.split(8), z2.split(8), strict=True):
        one.update(a, b)
    rank0.update(z1[:8], z2[:8])
    rank0.update(z1[8:16], z2[8:16])
    for a, b in zip(z1[16:].split(8), z2[16:].split(8), strict=True):
        rank1.update(a, b)
    rank0.merge_state(rank1)
    for key, value in one.compute().items():
        assert rank0.compute()[key].item() == pytest.approx(value.item(), abs=1e-6)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"num_features": 0, "temperature": 0.2}, "num_features"),
        ({"num_features": 4, "temperature": 0.0}, "temperature"),
        ({"num_features": 4, "temperature": 0.2, "ks": (0,)}, "ks must be an integer >= 1, got 0"),
        ({"num_features": 4, "temperature": 0.2, "ks": (2.5,)}, r"integer >= 1, got 2\.5"),
        ({"num_features": 4, "temperature": 0.2, "ks": ()}, "at least one"),
    ],
)
def test_metric_argument_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SEPIN(**kwargs)


def test_shape_and_argument_errors():
    z = torch.rand(5, 4)
    metric = SEPIN(4, 0.2)
    with pytest.raises(ValueError, match=r"z2 must have shape \[5, 4\], got \(5, 3\)"):
        metric.update(z, torch.rand(5, 3))
    with pytest.raises(ValueError, match=r"z1 must have shape \[B, 4\], got \(5, 3\)"):
        metric.update(torch.rand(5, 3), torch.rand(5, 3))
    with pytest.raises(ValueError, match="equal shape"):
        sepin_per_dimension(z, z[:4], 0.2)
    with pytest.raises(ValueError, match="temperature"):
        sepin_per_dimension(z, z, -1.0)
    with pytest.raises(ValueError, match="B >= 1"):
        sepin_per_dimension(z[:0], z[:0], 0.2)
    with pytest.raises(ValueError, match="chunk_size"):
        sepin_per_dimension(z, z, 0.2, chunk_size=0)
    with pytest.raises(ValueError, match="per_dim"):
        sepin_at_k(torch.zeros(2, 2))
