"""Feature selection on constructed features, and the probe fit on fixed features."""

from __future__ import annotations

import lightning as L
import pytest
import torch

from ncl_lightning.data import DigitsDataModule
from ncl_lightning.evaluation import (
    FeatureSelection,
    default_ks,
    fit_linear_probe,
    probe_accuracy,
    selection_table,
)
from ncl_lightning.evaluation.selection import select_dims
from ncl_lightning.foundation.errors import UsageError
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


def _reference_top_k(features: torch.Tensor, k: int) -> set[int]:
    """Top-k dims by the mean over rows of ``x_i / ||x||``, one row and one dim at a time."""
    n, d = features.shape
    rows = features.tolist()
    norms = [sum(v * v for v in row) ** 0.5 for row in rows]
    means = [sum(rows[r][i] / norms[r] for r in range(n)) / n for i in range(d)]
    return set(sorted(range(d), key=lambda i: -means[i])[:k])


def test_ea_no_relu_ranks_the_features_before_the_map() -> None:
    """Dims 0-2 spike to +6 half the time and sit at -8 otherwise (large EA after ReLU,
    negative mean before it); dims 3-5 are steadily slightly positive: the two rules must
    pick different dims, and ``ea_no_relu`` those of a slow reference on the pre-map
    features."""
    gen = torch.Generator().manual_seed(0)
    n, d = 200, 12
    p = -0.5 + 0.1 * torch.randn(n, d, generator=gen)
    spikes = torch.rand(n, 3, generator=gen) < 0.5
    p[:, :3] = torch.where(spikes, torch.full((n, 3), 6.0), torch.full((n, 3), -8.0))
    p[:, 3:6] = 0.3 + 0.05 * torch.rand(n, 3, generator=gen)
    z = torch.relu(p)
    ea, pre_ea = expected_activation(z), expected_activation(p)
    no_relu = select_dims(ea, 3, "ea_no_relu", seed=0, pre_map_ea=pre_ea)
    assert set(no_relu.tolist()) == _reference_top_k(p, 3) == {3, 4, 5}
    assert set(select_dims(ea, 3, "ea", seed=0).tolist()) == _reference_top_k(z, 3) == {0, 1, 2}
    # without a map the two rules agree
    assert torch.equal(
        select_dims(ea, 5, "ea_no_relu", 0, pre_map_ea=ea), select_dims(ea, 5, "ea", 0)
    )
    with pytest.raises(ValueError, match="rule must be one of"):
        select_dims(ea, 3, "ea_relu", seed=0)
    with pytest.raises(UsageError, match="ea_no_relu needs pre_map_ea"):
        select_dims(ea, 3, "ea_no_relu", seed=0)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["ncl", "cl"])
def test_feature_selection_runs_the_pre_map_rule(name: str, tmp_path) -> None:
    path = _fit_and_save(FACTORIES[name](), tmp_path / f"{name}.ckpt")  # projector width 16
    rules = ["ea", "ea_no_relu", "random"]
    model = FeatureSelection(str(path), num_classes=10, ks=[4], rules=rules, probe_epochs=1)
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False,
                        enable_model_summary=False, default_root_dir=tmp_path)  # fmt: skip
    trainer.test(model, DigitsDataModule(batch_size=64))
    assert list(model.results) == rules and all(list(r) == [4] for r in model.results.values())
    assert "test/selection/ea_no_relu/k4/linear_acc" in trainer.callback_metrics
    both, _ = model._clean(trainer.datamodule, "train", pre_map=True)
    z, pre = both.chunk(2, dim=1)
    assert torch.equal(z, model._train[0]) and z.shape[1] == 16
    # NCL's z is ReLU(p) of the pre-map features; CL's z is p itself
    assert torch.equal(z, torch.relu(pre) if name == "ncl" else pre)
    assert torch.allclose(model._pre_map_ea, expected_activation(pre))  # what the rule ranks
    if name == "ncl":
        assert (pre < 0).any()


def test_rules_are_checked() -> None:
    from ncl_lightning.evaluation.selection import DEFAULT_RULES, RULES, check_rules

    assert set(DEFAULT_RULES) < set(RULES) == {"ea", "ea_no_relu", "random"}
    check_rules(None)
    check_rules(["ea_no_relu", "random"])
    for bad, message in (([], "distinct"), (["ea", "ea"], "distinct"), (["top"], "one of")):
        with pytest.raises(ValueError, match=message):
            check_rules(bad)
