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
from ncl_lightning.evaluation.selection import rule_activations, select_dims
from ncl_lightning.foundation.errors import ConfigError
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


def _pre_map_features(n: int = 200, d: int = 12) -> torch.Tensor:
    """Projector outputs ``p`` ``[n, d]``: dims 0-2 spike to +6 half the time and sit at -8
    otherwise (large EA after ReLU, negative mean before it); dims 3-5 are steadily slightly
    positive; the others hover around -0.5."""
    gen = torch.Generator().manual_seed(0)
    p = -0.5 + 0.1 * torch.randn(n, d, generator=gen)
    spikes = torch.rand(n, 3, generator=gen) < 0.5
    p[:, :3] = torch.where(spikes, torch.full((n, 3), 6.0), torch.full((n, 3), -8.0))
    p[:, 3:6] = 0.3 + 0.05 * torch.rand(n, 3, generator=gen)
    return p


def test_pre_map_rules_rank_p_and_relu_p() -> None:
    """NCL (``z = ReLU(p)``, probed on ``z``): ``ea_no_relu`` ranks ``p`` and picks dims 3-5,
    ``ea_relu`` and ``ea`` rank ``ReLU(p)`` and pick dims 0-2, each as a slow reference does."""
    p = _pre_map_features()
    z = torch.relu(p)
    picks = {
        rule: set(select_dims(rule_activations(z, p, rule), 3, rule, seed=0).tolist())
        for rule in ("ea", "ea_no_relu", "ea_relu")
    }
    assert picks["ea_no_relu"] == _reference_top_k(p, 3) == {3, 4, 5}
    assert picks["ea_relu"] == picks["ea"] == _reference_top_k(z, 3) == {0, 1, 2}
    # without a map (space p or h, CL's z) ea and ea_no_relu rank the same tensor
    for rule in ("ea", "ea_no_relu"):
        assert torch.equal(rule_activations(p, p, rule), rule_activations(p, p, "ea"))
    with pytest.raises(ValueError, match="rule must be one of"):
        select_dims(rule_activations(z, p, "ea"), 3, "ea_top", seed=0)
    with pytest.raises(ValueError, match="rule must be one of"):
        rule_activations(z, p, "ea_top")


def test_cl_rows_w_and_wo_relu_differ_on_p() -> None:
    """Table 1's CL rows: on CL's raw projector output (signed, no map) the release's rule
    ``ea_relu`` (EA of ``normalize(relu(p))``) and ``ea_no_relu`` (EA of ``normalize(p)``)
    pick different dims, each the slow reference's."""
    p = _pre_map_features()
    with_relu = select_dims(rule_activations(p, p, "ea_relu"), 3, "ea_relu", seed=0)
    without = select_dims(rule_activations(p, p, "ea_no_relu"), 3, "ea_no_relu", seed=0)
    assert set(with_relu.tolist()) == _reference_top_k(torch.relu(p), 3) == {0, 1, 2}
    assert set(without.tolist()) == _reference_top_k(p, 3) == {3, 4, 5}
    # the order too: by decreasing EA of normalize(relu(p)), with a margin between ranks
    ea = _reference_means(torch.relu(p))
    assert with_relu.tolist() == sorted(range(12), key=lambda i: -ea[i])[:3]
    assert min(ea[i] for i in with_relu.tolist()) > max(ea[3:]) + 0.1


def _reference_means(features: torch.Tensor) -> list[float]:
    """Mean over rows of ``x_i / ||x||`` (0 for an all-zero row), one entry at a time."""
    rows = features.tolist()
    norms = [sum(v * v for v in row) ** 0.5 for row in rows]
    d = len(rows[0])
    return [
        sum(row[i] / norm for row, norm in zip(rows, norms, strict=True) if norm > 0) / len(rows)
        for i in range(d)
    ]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["ncl", "cl"])
def test_feature_selection_runs_the_pre_map_rules(name: str, tmp_path) -> None:
    path = _fit_and_save(FACTORIES[name](), tmp_path / f"{name}.ckpt")  # projector width 16
    rules = ["ea", "ea_no_relu", "ea_relu", "random"]
    model = FeatureSelection(str(path), num_classes=10, ks=[4], rules=rules, probe_epochs=1)
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False,
                        enable_model_summary=False, default_root_dir=tmp_path)  # fmt: skip
    trainer.test(model, DigitsDataModule(batch_size=64))
    assert list(model.results) == rules and all(list(r) == [4] for r in model.results.values())
    assert "test/selection/ea_relu/k4/linear_acc" in trainer.callback_metrics
    both, _ = model._clean(trainer.datamodule, "train", pre_map=True)
    z, pre = both.chunk(2, dim=1)
    assert torch.equal(z, model._train[0]) and z.shape[1] == 16
    # NCL's z is ReLU(p) of the pre-map features; CL's z is p itself
    assert torch.equal(z, torch.relu(pre) if name == "ncl" else pre)
    assert torch.allclose(model._eas["ea_no_relu"], expected_activation(pre))  # what it ranks
    assert torch.allclose(model._eas["ea_relu"], expected_activation(torch.relu(pre)))
    if name == "ncl":
        assert (pre < 0).any()


@pytest.mark.slow
def test_release_rule_and_space_pick_the_reference_dims(tmp_path) -> None:
    """``space: p`` with ``ea_relu`` on an NCL checkpoint: the probed training features are
    ``projector(backbone(x))`` of the clean training images, recomputed here from an
    independent copy of the method, and the chosen dims are the top-k of a hand-computed
    mean of ``normalize(relu(p))`` (the release's ``training_epoch_end``)."""
    from ncl_lightning import load_method

    path = _fit_and_save(FACTORIES["ncl"](), tmp_path / "ncl.ckpt")
    model = FeatureSelection(
        str(path), num_classes=10, ks=[8, 16], space="p", rules=["ea_relu", "ea_no_relu"],
        probe_epochs=1,
    )  # fmt: skip
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False,
                        enable_model_summary=False, default_root_dir=tmp_path)  # fmt: skip
    data = DigitsDataModule(batch_size=64)
    trainer.test(model, data)
    method = load_method(path)
    with torch.no_grad():
        p = torch.cat([method.projector(method.backbone(x)) for x, _ in
                       DigitsDataModule(batch_size=64).clean_dataloader("train")])  # fmt: skip
    torch.testing.assert_close(model._train[0], p)
    assert (p < 0).any()  # the probed space is signed: p, not ReLU(p)
    ea = _reference_means(torch.relu(p))
    for k in (4, 8):
        chosen = set(select_dims(model._eas["ea_relu"], k, "ea_relu", seed=0).tolist())
        # every kept dim's reference EA is at least every dropped one's (ties, e.g. dead
        # dims at 0, may go either way)
        dropped = set(range(16)) - chosen
        assert len(chosen) == k
        assert min(ea[i] for i in chosen) >= max(ea[i] for i in dropped) - 1e-6
    assert torch.allclose(model._eas["ea_no_relu"], expected_activation(p))
    assert set(model.results) == {"ea_relu", "ea_no_relu"}
    # all 16 dims: the same set under either rule, so the same probe
    assert model.results["ea_relu"][16]["linear_acc"] == pytest.approx(
        model.results["ea_no_relu"][16]["linear_acc"], abs=0.02
    )


def _euclidean_p_at_10(z: torch.Tensor, y: torch.Tensor, dims: list[int]) -> float:
    """The NCL release's retrieval, one query at a time: rows normalised over all dims, the
    kept dims not re-normalised, the 10 nearest others by Euclidean distance."""
    hits = 0
    rows = [row / row.norm() for row in z.double()]
    kept = [row[dims] for row in rows]
    for i, query in enumerate(kept):
        order = sorted((float((query - other).norm()), j) for j, other in enumerate(kept) if j != i)
        hits += sum(int(y[j] == y[i]) for _, j in order[:10])
    return hits / (10 * len(kept))


@pytest.mark.slow
def test_release_retrieval_is_euclidean_without_renormalising(tmp_path) -> None:
    path = _fit_and_save(FACTORIES["ncl"](), tmp_path / "ncl.ckpt")
    model = FeatureSelection(
        str(path), num_classes=10, ks=[4], space="p", rules=["ea_relu"], probe_epochs=1,
        retrieval_distance="euclidean",
    )  # fmt: skip
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False,
                        enable_model_summary=False, default_root_dir=tmp_path)  # fmt: skip
    trainer.test(model, DigitsDataModule(batch_size=64))
    z = torch.cat([f for f, _ in model._test])
    y = torch.cat([label for _, label in model._test])
    dims = select_dims(model._eas["ea_relu"], 4, "ea_relu", seed=0).tolist()
    row = model.results["ea_relu"][4]
    assert set(row) == {"linear_acc", "retrieval_p@10_euclidean"}
    assert row["retrieval_p@10_euclidean"] == pytest.approx(
        _euclidean_p_at_10(z, y, dims), abs=1e-6
    )
    # re-normalising the kept dims (the paper's cosine) ranks differently on a subset
    cosine = retrieval_precision(z, y, k=10, dims=torch.tensor(dims)).item()
    assert cosine != pytest.approx(row["retrieval_p@10_euclidean"], abs=1e-6)
    with pytest.raises(ConfigError, match="retrieval_distance must be one of"):
        FeatureSelection(str(path), num_classes=10, retrieval_distance="manhattan")


def test_rules_are_checked() -> None:
    from ncl_lightning.evaluation.selection import DEFAULT_RULES, RULES, check_rules

    assert set(DEFAULT_RULES) < set(RULES) == {"ea", "ea_no_relu", "ea_relu", "random"}
    check_rules(None)
    check_rules(["ea_no_relu", "ea_relu", "random"])
    for bad, message in (([], "distinct"), (["ea", "ea"], "distinct"), (["top"], "one of")):
        with pytest.raises(ValueError, match=message):
            check_rules(bad)
