"""Feature selection on constructed features, and the probe fit on fixed features."""

from __future__ import annotations

import pytest
import torch

from ncl_lightning.evaluation import (
    FeatureSelection,
    default_ks,
    fit_linear_probe,
    probe_accuracy,
    selection_table,
)
from ncl_lightning.evaluation.selection import select_dims
from ncl_lightning.metrics.functional import expected_activation, retrieval_precision
from tests.checkpoints.test_checkpoint import FACTORIES, _fit_and_save


def _constructed(n: int = 600, d: int = 64, classes: int = 6, seed: int = 0):
    """Non-negative features whose dims 40..45 each fire, strongly, for one class; the
    other dims are weak label-free noise. The informative dims are known exactly."""
    gen = torch.Generator().manual_seed(seed)
    y = torch.randint(0, classes, (n,), generator=gen)
    z = 0.2 * torch.rand(n, d, generator=gen)
    informative = torch.arange(40, 40 + classes)
    z[torch.arange(n), informative[y]] += 3.0 + torch.rand(n, generator=gen)
    return z, y, informative


def test_ea_selection_finds_the_label_dims_and_random_does_not() -> None:
    z, y, informative = _constructed()
    ea = expected_activation(z)
    k = len(informative)
    chosen = select_dims(ea, k, "ea", seed=0)
    assert set(chosen.tolist()) == set(informative.tolist())
    random = select_dims(ea, k, "random", seed=0)
    assert len(set(random.tolist()) & set(informative.tolist())) <= 2
    assert torch.equal(random, select_dims(ea, k, "random", seed=0))  # seeded

    train, test = slice(0, 400), slice(400, None)
    acc = {
        rule: probe_accuracy(
            (z[train][:, dims], y[train]), (z[test][:, dims], y[test]), 6, epochs=30
        )
        for rule, dims in (("ea", chosen), ("random", random))
    }
    assert acc["ea"] > 0.95 and acc["random"] < 0.6, acc
    p_ea = retrieval_precision(z[test], y[test], k=10, dims=chosen)
    p_random = retrieval_precision(z[test], y[test], k=10, dims=random)
    assert p_ea > 0.95 and p_random < 0.6


def test_fit_linear_probe_is_deterministic_and_separates_classes() -> None:
    z, y, _ = _constructed(seed=1)
    a = fit_linear_probe(z, y, 6, epochs=5, seed=3)(z)
    b = fit_linear_probe(z, y, 6, epochs=5, seed=3)(z)
    assert torch.equal(a, b)
    assert (a.argmax(1) == y).float().mean() > 0.99


def test_default_ks_and_table() -> None:
    assert default_ks(64) == [8, 16, 32, 64]
    assert default_ks(100) == [8, 16, 32, 64, 100]
    table = selection_table({"ea": {8: {"linear_acc": 0.5}}, "random": {8: {"linear_acc": 0.25}}})
    assert table.splitlines()[2] == "| ea | 8 | 50.00 |"
    assert table.splitlines()[3] == "| random | 8 | 25.00 |"


def test_bad_ks_fail_before_any_encoding(tmp_path) -> None:
    path = _fit_and_save(FACTORIES["ncl"](), tmp_path / "ncl.ckpt")  # projector width 16
    with pytest.raises(ValueError, match=r"ks must be in \[1, 16\], got 32"):
        FeatureSelection(str(path), num_classes=10, ks=[8, 32])
    with pytest.raises(ValueError, match=r"ks must be in \[1, 24\]"):
        FeatureSelection(str(path), num_classes=10, ks=[25], space="h")
    assert FeatureSelection(str(path), num_classes=10, ks=[4, 16]).hparams.ks == [4, 16]
