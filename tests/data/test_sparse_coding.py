"""Sparse-coding data (Pokle et al., AISTATS 2022): model, masks, DataModule contract."""

from __future__ import annotations

import math
import random

import pytest
import torch

from ncl_lightning.data.sparse_coding import (
    SparseCodingDataModule,
    SparseCodingModel,
    mask_views,
)
from ncl_lightning.foundation.errors import ConfigError


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize(("p", "d"), [(50, 10), (20, 20), (5, 1)])
def test_dictionary_is_column_orthonormal(p, d):
    m = SparseCodingModel(p=p, d=d, seed=3).dictionary
    assert m.shape == (p, d) and m.dtype == torch.float32
    assert torch.allclose(m.T @ m, torch.eye(d), atol=1e-5)


@pytest.mark.parametrize("beta", [0.1, 0.3, 1.0])
def test_symmetric_latents(beta):
    model = SparseCodingModel(nonzero_prob=beta)
    z = model.sample_latents(20000, _gen())
    assert z.shape == (20000, 10)
    assert set(z.unique().tolist()) <= {-1.0, 0.0, 1.0}
    assert ((z != 0).sum(dim=1) >= 1).all()
    frac = (z != 0).float().mean().item()
    assert frac == pytest.approx(model.expected_nonzero_fraction(), abs=0.01)
    assert (z == 1).sum().item() / (z != 0).sum().item() == pytest.approx(0.5, abs=0.01)


@pytest.mark.parametrize("beta", [0.1, 0.3])
def test_paper_latents_match_a_rejection_sampling_reference(beta):
    """Pokle et al. (2022) Sec. 5.2.2: each z_i is -1 or +1 w.p. β/2, else 0, and every z
    has at least one non-zero entry. The reference draws whole vectors entry by entry and
    redraws all-zero ones; the number of non-zeros per sample has the same law (at
    β = 0.1 no longer the code's fixed 2)."""
    d, n = 10, 20000
    rng = random.Random(beta)
    reference = [0] * (d + 1)
    for _ in range(n):
        while not any(z := [rng.choice((-1, 1)) if rng.random() < beta else 0 for _ in range(d)]):
            pass
        reference[sum(v != 0 for v in z)] += 1
    z = SparseCodingModel(nonzero_prob=beta, support="bernoulli").sample_latents(n, _gen(4))
    counts = torch.bincount((z != 0).sum(dim=1), minlength=d + 1).tolist()
    assert counts[0] == reference[0] == 0
    for k in range(1, d + 1):
        assert abs(counts[k] - reference[k]) / n < 0.015, k
    assert abs((z == -1).sum().item() - (z == 1).sum().item()) / (z != 0).sum().item() < 0.03


def test_binary_latents():
    model = SparseCodingModel(latent="binary", nonzero_prob=0.2, d=12)
    z = model.sample_latents(20000, _gen())
    assert set(z.unique().tolist()) == {0.0, 1.0}
    assert ((z != 0).sum(dim=1) >= 1).all()
    expected = 0.2 / (1 - 0.8**12)
    assert model.expected_nonzero_fraction() == pytest.approx(expected)
    assert (z != 0).float().mean().item() == pytest.approx(expected, abs=0.01)
    # P(z_j != 0 | z != 0) = β / P(z != 0) is the same for every coordinate j.
    per_coord = (z != 0).float().mean(dim=0)
    assert torch.allclose(per_coord, torch.full((12,), expected), atol=0.02)


def test_default_noise_variance():
    model = SparseCodingModel()
    assert model.sigma2 == pytest.approx(math.log(10) / 10)
    x, z = model.sample(20000, _gen(1))
    noise = x - z @ model.dictionary.T
    assert noise.var().item() == pytest.approx(math.log(10) / 10, rel=0.02)
    assert abs(noise.mean().item()) < 0.01


def test_zero_noise():
    model = SparseCodingModel(noise_var=0.0)
    x, z = model.sample(100, _gen())
    assert torch.allclose(x, z @ model.dictionary.T)


def test_independent_masks():
    x = torch.ones(4000, 50)
    v1, v2 = mask_views(x, 0.5, "independent", _gen())
    assert set(v1.unique().tolist()) == {0.0, 1.0}
    assert v1.mean().item() == pytest.approx(0.5, abs=0.01)
    assert v2.mean().item() == pytest.approx(0.5, abs=0.01)
    assert (v1 * v2).mean().item() == pytest.approx(0.25, abs=0.01)
    v1, v2 = mask_views(x, 0.3, "independent", _gen(1))
    assert v1.mean().item() == pytest.approx(0.3, abs=0.01)
    assert (v1 * v2).mean().item() == pytest.approx(0.09, abs=0.01)


def test_dependent_masks_are_complementary():
    x = torch.randn(1000, 50, generator=_gen(2))
    v1, v2 = mask_views(x, 0.5, "dependent", _gen())
    assert torch.allclose(v1 + v2, 2 * x)
    kept1, kept2 = v1 != 0, v2 != 0
    assert not (kept1 & kept2).any()
    assert torch.equal(v1[kept1], 2 * x[kept1])
    assert kept1.float().mean().item() == pytest.approx(0.5, abs=0.01)


def test_datamodule_batches():
    dm = SparseCodingDataModule(n=300, val_n=250, batch_size=100)
    assert dm.num_classes == 0 and dm.in_dim == 50
    assert dm.dictionary.shape == (50, 10)
    assert dm.train_latents.shape == (300, 10) and dm.val_latents.shape == (250, 10)
    dm.setup("fit")
    batches = list(dm.train_dataloader())
    assert len(batches) == 3
    views, z = batches[0]
    assert isinstance(views, list) and len(views) == 2
    for v in views:
        assert v.shape == (100, 50) and v.dtype == torch.float32
    assert z.shape == (100, 10)
    assert not torch.equal(views[0], views[1])
    val = list(dm.val_dataloader())
    assert [b[0].shape[0] for b in val] == [100, 100, 50]
    assert torch.equal(torch.cat([b[0] for b in val]), dm.val_inputs)
    assert torch.equal(torch.cat([b[1] for b in val]), dm.val_latents)


def test_dependent_datamodule_views():
    dm = SparseCodingDataModule(n=200, val_n=10, views="dependent", noise_var=0.0)
    dm.setup("fit")
    (v1, v2), z = next(iter(dm.train_dataloader()))
    assert torch.allclose(v1 + v2, 2 * z @ dm.dictionary.T, atol=1e-6)


def test_masks_are_redrawn_every_batch():
    dm = SparseCodingDataModule(n=100, val_n=10, batch_size=100)
    dm.setup("fit")
    ((a, _), za), ((b, _), zb) = (
        next(iter(dm.train_dataloader())),
        next(iter(dm.train_dataloader())),
    )
    assert torch.equal(za, zb) and torch.equal(a, b)  # the same epoch, the same batch
    assert 0.4 < (a != 0).float().mean().item() < 0.6
    collate = dm.train_dataloader().collate_fn
    keys = [(i, 7 + i) for i in range(100)]
    state = torch.get_rng_state()
    (d, _), _ = collate(keys)
    (e, _), _ = collate([(i, 8 + i) for i in range(100)])
    assert torch.equal(torch.get_rng_state(), state)  # the global stream is untouched
    assert not torch.equal(d != 0, e != 0)  # other keys, other masks


def test_determinism_under_seed():
    dms = [SparseCodingDataModule(n=200, val_n=50, seed=7) for _ in range(2)]
    for dm in dms:
        dm.setup("fit")
    assert torch.equal(dms[0].dictionary, dms[1].dictionary)
    assert torch.equal(dms[0].train_inputs, dms[1].train_inputs)
    assert torch.equal(dms[0].val_latents, dms[1].val_latents)
    (a1, a2), za = next(iter(dms[0].train_dataloader()))
    (b1, b2), zb = next(iter(dms[1].train_dataloader()))
    assert torch.equal(a1, b1) and torch.equal(a2, b2) and torch.equal(za, zb)
    other = SparseCodingDataModule(n=200, val_n=50, seed=8)
    assert not torch.equal(other.dictionary, dms[0].dictionary)
    assert not torch.equal(dms[0].train_inputs[:50], dms[0].val_inputs)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"nonzero_prob": 0.0}, "nonzero_prob"),
        ({"nonzero_prob": 1.5}, "nonzero_prob"),
        ({"alpha": 0.0}, "alpha"),
        ({"alpha": 1.0}, "alpha"),
        ({"d": 60}, "p must be an integer >= 60, got 50"),
        ({"d": 0}, "d must be"),
        ({"n": 0}, "n must be"),
        ({"val_n": 0}, "val_n"),
        ({"batch_size": 2000}, "batch_size"),
        ({"batch_size": 0}, "batch_size"),
        ({"noise_var": -1.0}, "noise_var"),
        ({"latent": "gaussian"}, "latent"),
        ({"views": "shared"}, "views"),
        ({"seed": -1}, "seed"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SparseCodingDataModule(**kwargs)


def test_mask_views_bad_arguments():
    x = torch.ones(2, 3)
    with pytest.raises(ValueError, match="alpha"):
        mask_views(x, 1.0)
    with pytest.raises(ValueError, match="scheme"):
        mask_views(x, 0.5, "shared")  # type: ignore[arg-type]


# --- Fixed-count latents (Pokle et al.'s data_model/gen_sparse_coding_data.py, gen_z) ---


def _reference_count(d: int, beta: float) -> int:
    """The authors' rule, by hand: ``s1 = ceil(d β / 2)`` entries -1, ``s2 - s1`` entries +1
    with ``s2 = max(ceil(d β), s1 + 1)``."""
    s1 = math.ceil(round(d * beta / 2, 9))
    return max(math.ceil(round(d * beta, 9)), s1 + 1)


def _reference_row(d: int, count: int, symmetric: bool, generator: torch.Generator):
    """One latent, the slow obvious way: the fixed vector, then a random permutation."""
    negatives = math.ceil(count / 2) if symmetric else 0
    base = [-1.0] * negatives + [1.0] * (count - negatives) + [0.0] * (d - count)
    order = torch.randperm(d, generator=generator).tolist()
    return [base[order.index(j)] for j in range(d)]


@pytest.mark.parametrize(("beta", "count"), [(0.1, 2), (0.2, 2), (0.3, 3), (0.5, 5), (1.0, 10)])
def test_fixed_count_follows_the_authors_rule(beta, count):
    assert _reference_count(10, beta) == count
    assert SparseCodingModel(nonzero_prob=beta, support="fixed_count").count == count


@pytest.mark.parametrize(("latent", "count"), [("symmetric", 3), ("symmetric", 2), ("binary", 4)])
def test_fixed_count_latents_match_a_slow_reference(latent, count):
    d, n = 6, 30000
    model = SparseCodingModel(
        p=8, d=d, latent=latent, support="fixed_count", nonzero_count=count, seed=1
    )
    z = model.sample_latents(n, _gen(2))
    symmetric = latent == "symmetric"
    ref = torch.tensor([_reference_row(d, count, symmetric, _gen(i)) for i in range(2000)])
    # Every row holds exactly the fixed multiset of values (as the reference's rows do).
    want = sorted(ref[0].tolist())
    assert all(sorted(row) == want for row in z.tolist())
    assert ((z != 0).sum(dim=1) == count).all()
    assert model.expected_nonzero_fraction() == pytest.approx(count / d)
    # Positions uniform: each coordinate takes each value with the reference's frequency.
    for value in (-1.0, 1.0):
        freq = (z == value).float().mean(dim=0)
        expected = (ref == value).float().mean().item()  # by symmetry, one number
        assert expected == pytest.approx(want.count(value) / d, abs=0.03)
        assert torch.allclose(freq, torch.full((d,), want.count(value) / d), atol=0.015)
    # Uniform over supports: every pair of coordinates is jointly non-zero equally often.
    nonzero = (z != 0).float()
    pairs = (nonzero.T @ nonzero / n)[torch.triu_indices(d, d, 1).unbind()]
    assert torch.allclose(
        pairs, torch.full_like(pairs, count * (count - 1) / (d * (d - 1))), atol=0.015
    )


def test_fixed_count_datamodule_is_seeded_and_resumable():
    kwargs = {"n": 200, "val_n": 50, "nonzero_prob": 0.3, "support": "fixed_count"}
    a, b = (SparseCodingDataModule(seed=5, **kwargs) for _ in range(2))
    assert torch.equal(a.train_latents, b.train_latents) and torch.equal(a.val_inputs, b.val_inputs)
    assert ((a.train_latents != 0).sum(dim=1) == 3).all()
    assert ((a.val_latents == -1).sum(dim=1) == 2).all()
    other = SparseCodingDataModule(seed=6, **kwargs)
    assert not torch.equal(other.train_latents, a.train_latents)
    # Same seed, other support law: other latents, the same dictionary.
    bernoulli = SparseCodingDataModule(seed=5, **{**kwargs, "support": "bernoulli"})
    assert torch.equal(bernoulli.dictionary, a.dictionary)
    assert not torch.equal(bernoulli.train_latents, a.train_latents)


@pytest.mark.slow
def test_fixed_count_run_resumes_mid_epoch(tmp_path):
    from tests.data.test_resume_generated import _cl, _fit

    def data():
        return SparseCodingDataModule(
            n=64, p=12, d=4, batch_size=16, val_n=16, seed=4, support="fixed_count",
            nonzero_count=2,
        )  # fmt: skip

    from ncl_lightning.nn import SparseCodingEncoder

    _, want = _fit(lambda: _cl(SparseCodingEncoder(12, 8)), data(), tmp_path / "reference")
    mid = tmp_path / "mid.ckpt"
    _, stopped = _fit(lambda: _cl(SparseCodingEncoder(12, 8)), data(), tmp_path / "run", mid)
    saved = torch.load(mid, weights_only=False)["datamodule_hyper_parameters"]
    assert saved["support"] == "fixed_count"
    _, resumed = _fit(
        lambda: _cl(SparseCodingEncoder(12, 8)), data(), tmp_path / "run", ckpt_path=mid
    )
    seen = stopped.batches + resumed.batches
    assert len(seen) == len(want.batches) == 8
    for (_, _, views), (_, _, ref) in zip(seen, want.batches, strict=True):
        assert all(torch.equal(x, y) for x, y in zip(views, ref, strict=True))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"support": "poisson"}, "support must be one of"),
        ({"nonzero_count": 2}, "needs support='fixed_count'"),
        ({"support": "fixed_count", "nonzero_count": 0}, r"nonzero_count must be in \[1, 10\]"),
        ({"support": "fixed_count", "nonzero_count": 11}, r"nonzero_count must be in \[1, 10\]"),
        ({"support": "fixed_count", "d": 1, "nonzero_prob": 1.0}, "nonzero_count"),
    ],
)
def test_fixed_count_bad_arguments(kwargs, match):
    with pytest.raises(ConfigError, match=match) as info:
        SparseCodingDataModule(**kwargs)
    assert info.value.key in ("support", "nonzero_count")
