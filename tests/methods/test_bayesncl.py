"""BayesNCL: straight-through gates, detached KL, Gumbel gate, groups, checkpoints, TopK."""

from __future__ import annotations

import math
from pathlib import Path

import lightning as L
import pytest
import torch

from ncl_lightning.data import DigitsDataModule
from ncl_lightning.methods import BayesNCL, NCLTopK
from ncl_lightning.nn import SmallCNN
from ncl_lightning.nn.gates import GATES, GumbelGate, LogisticGate, STEGate, bernoulli_kl


def _model(**kw) -> BayesNCL:
    torch.manual_seed(0)
    kw.setdefault("num_classes", 0)
    kw.setdefault("batch_size", 8)
    return BayesNCL(SmallCNN(1, 8, 16), proj_hidden_dim=32, proj_output_dim=12, **kw)


def test_ste_forward_is_exact_hard_gate_and_gradient_is_the_sigmoid_path() -> None:
    torch.manual_seed(0)
    logits = torch.randn(6, 5, dtype=torch.double, requires_grad=True)
    z, w, temperature = (
        torch.rand(6, 5, dtype=torch.double),
        torch.randn(6, 5, dtype=torch.double),
        0.7,
    )
    alpha = torch.sigmoid(logits / temperature)
    mask = STEGate(0.5).train()(alpha)
    out = z * mask
    assert torch.equal(out, z * (alpha > 0.5).double())
    (out * w).sum().backward()
    s = torch.sigmoid(logits.detach() / temperature)
    expected = z * w * s * (1 - s) / temperature  # d/dlogits of sum(z * w * sigmoid(l / T))
    torch.testing.assert_close(logits.grad, expected)


def test_encode_gates_the_non_negative_features() -> None:
    model = _model().train()
    x = torch.randn(8, 1, 8, 8)
    out = model.encode(x)
    with torch.no_grad():
        h = model.backbone(x)
    assert set(out.mask.unique().tolist()) <= {0.0, 1.0}
    torch.testing.assert_close(out.alpha, model.gate_probs(out.h))
    assert torch.equal(out.mask, (out.alpha > 0.5).float())
    assert (out.z >= 0).all() and torch.equal(out.z == 0, (out.z == 0) | (out.mask == 0))
    assert h.shape == out.h.shape


@pytest.mark.parametrize("detach", [True, False])
def test_kl_reaches_only_the_gating_head_unless_detachment_is_off(detach: bool) -> None:
    model = _model(detach_gate_input=detach).train()
    views = [model.encode(torch.randn(8, 1, 8, 8)) for _ in range(2)]
    model.kl(views).backward()
    backbone = [p.grad for p in model.backbone.parameters()]
    projector = [p.grad for p in model.projector.parameters()]
    assert all(g is None or torch.count_nonzero(g) == 0 for g in projector)
    gate_grads = [p.grad for p in model.gating_head.parameters()]
    assert all(g is not None for g in gate_grads) and any(g.abs().sum() > 0 for g in gate_grads)
    if detach:
        assert all(g is None or torch.count_nonzero(g) == 0 for g in backbone)
    else:
        assert any(g is not None and g.abs().sum() > 0 for g in backbone)


def test_contrastive_loss_trains_backbone_projector_and_gate() -> None:
    model = _model().train()
    views = [model.encode(torch.randn(8, 1, 8, 8)) for _ in range(2)]
    model.objective(views).backward()
    for part in (model.backbone, model.projector, model.gating_head):
        assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in part.parameters())


def test_bernoulli_kl_matches_the_formula() -> None:
    a = torch.tensor([0.1, 0.5, 0.8, 0.99])
    rho = 0.8
    expected = a * torch.log(a / rho) + (1 - a) * torch.log((1 - a) / (1 - rho))
    torch.testing.assert_close(bernoulli_kl(a, rho), expected)
    assert bernoulli_kl(torch.tensor([rho]), rho).abs().item() < 1e-7


def test_bernoulli_kl_clamps_like_the_release() -> None:
    # The release clamps α and ρ to [0.01, 0.99]: outside, the KL is that of the boundary
    # and its gradient is zero.
    a = torch.tensor([0.001, 0.5, 0.9999], requires_grad=True)
    kl = bernoulli_kl(a, 0.8)
    boundary = bernoulli_kl(torch.tensor([0.01, 0.99]), 0.8, eps=0.0)
    torch.testing.assert_close(kl[[0, 2]].detach(), boundary)
    kl.sum().backward()
    assert a.grad[0] == 0 and a.grad[2] == 0 and a.grad[1] != 0
    # ρ is clamped too: a prior of 0.999 is read as 0.99.
    torch.testing.assert_close(bernoulli_kl(a.detach(), 0.999), bernoulli_kl(a.detach(), 0.99))
    # eps=1e-6 is the old, looser clamp: α = 0.001 then has a gradient.
    b = torch.tensor([0.001], requires_grad=True)
    bernoulli_kl(b, 0.8, eps=1e-6).sum().backward()
    assert b.grad[0] != 0


def _open_rate(gate: torch.nn.Module, alpha: torch.Tensor, seed: int) -> tuple[torch.Tensor, ...]:
    torch.manual_seed(seed)
    a = gate(alpha)
    torch.manual_seed(seed)
    b = gate(alpha)
    return a, b, gate(alpha)


@pytest.mark.parametrize("alpha", [0.3, 0.5, 0.7])
def test_gumbel_gate_is_the_release_estimator(alpha: float) -> None:
    # One Gumbel(0, 1) sample on the raw logits g = logit α (T = 1), thresholded at 0.5:
    # P(open) = P(G > -logit α) = 1 - exp(-exp(logit α)) = 1 - exp(-α / (1 - α)).
    gate = GumbelGate(0.5).train()
    probs = torch.full((4000, 8), alpha)
    a, b, c = _open_rate(gate, probs, 3)
    assert set(a.unique().tolist()) <= {0.0, 1.0}
    assert torch.equal(a, b) and not torch.equal(b, c)
    expected = 1 - math.exp(-alpha / (1 - alpha))
    assert abs(a.mean().item() - expected) < 0.015
    assert abs(expected - alpha) > 0.04  # so the two estimators are told apart
    assert torch.equal(gate.eval()(probs), (probs > 0.5).float())  # inference: 1[α > t]


def test_gumbel_gate_reads_the_sigmoid_temperature() -> None:
    # α = σ(g / T) with T = 2: the noise is added to g = 2 logit α, so s = σ(logit α + G / 2).
    alpha, temperature = 0.3, 2.0
    gate = GumbelGate(0.5, temperature=temperature).train()
    a = _open_rate(gate, torch.full((4000, 8), alpha), 5)[0]
    logit = math.log(alpha / (1 - alpha))
    expected = 1 - math.exp(-math.exp(temperature * logit))
    assert abs(a.mean().item() - expected) < 0.015


def test_gumbel_gate_gradient_is_straight_through_to_the_relaxed_sample() -> None:
    alpha = torch.full((1, 4), 0.4, requires_grad=True)
    torch.manual_seed(0)
    GumbelGate(0.5).train()(alpha).sum().backward()
    torch.manual_seed(0)
    u = torch.rand(1, 4).clamp(1e-6, 1 - 1e-6)
    s = torch.sigmoid(math.log(0.4 / 0.6) - torch.log(-torch.log(u)))
    # ds/dα = s (1 - s) / (α (1 - α)) through logit α
    torch.testing.assert_close(alpha.grad, s * (1 - s) / (0.4 * 0.6))


def test_logistic_gate_is_a_bernoulli_sample() -> None:
    gate = GATES.build("logistic", threshold=0.5).train()
    assert isinstance(gate, LogisticGate)
    a, b, c = _open_rate(gate, torch.full((4000, 8), 0.3), 3)
    assert set(a.unique().tolist()) <= {0.0, 1.0}
    assert torch.equal(a, b) and not torch.equal(b, c)
    assert abs(a.mean().item() - 0.3) < 0.015  # a Bernoulli(α) sample


def test_soft_gate_multiplies_by_alpha_in_training_and_is_hard_at_inference() -> None:
    gate = GATES.build("soft", threshold=0.5)
    alpha = torch.tensor([[0.2, 0.7]])
    assert torch.equal(gate.train()(alpha), alpha)
    assert torch.equal(gate.eval()(alpha), torch.tensor([[0.0, 1.0]]))


def test_bad_gate_settings_are_clear_errors() -> None:
    with pytest.raises(
        ValueError, match="unknown gate type 'hard'; valid names: gumbel, logistic, soft, ste"
    ):
        _model(gate="hard")
    with pytest.raises(ValueError, match=r"prior must be in \(0, 1\)"):
        _model(prior=1.0)
    with pytest.raises(ValueError, match="gate_layers must be one of 1, 2, 3, got 4"):
        _model(gate_layers=4)
    with pytest.raises(ValueError, match=r"threshold must be in \(0, 1\)"):
        _model(threshold=0.0)


@pytest.mark.parametrize("layers", [1, 2, 3])
def test_gating_head_depth_and_own_learning_rate(layers: int) -> None:
    model = _model(gate_layers=layers, gate_lr=0.05)
    linear = [m for m in model.gating_head.modules() if isinstance(m, torch.nn.Linear)]
    assert len(linear) == layers
    groups = model.param_groups()
    weights, biases = groups[-2:]  # the release's LARS groups (tests/optim/test_gate_groups.py)
    assert weights["lr"] == biases["lr"] == 0.05
    assert weights["scale_lr"] is biases["scale_lr"] is False  # not scaled by the batch
    assert {id(p) for p in weights["params"]} == {id(m.weight) for m in linear}
    assert {id(p) for p in biases["params"]} == {id(m.bias) for m in linear}
    assert "weight_decay" not in weights and not weights.get("lars_exclude", False)
    assert biases["weight_decay"] == 0.0 and biases["lars_exclude"] is True
    gate = {id(p) for p in model.gating_head.parameters()}
    others = {id(p) for g in groups[:-2] for p in g["params"]}
    assert not others & gate
    assert len(others) + len(gate) == len(list(model.parameters()))


def test_checkpoint_round_trip_restores_the_gate(tmp_path: Path) -> None:
    model = _model(num_classes=10, batch_size=64, gate="gumbel")
    trainer = L.Trainer(max_epochs=1, limit_train_batches=2, limit_val_batches=1, accelerator="cpu",
                        logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        default_root_dir=tmp_path)  # fmt: skip
    data = DigitsDataModule(batch_size=64)
    trainer.fit(model, data)
    path = tmp_path / "bayes.ckpt"
    trainer.save_checkpoint(path)
    restored = BayesNCL.load_from_checkpoint(path, backbone=SmallCNN(1, 8, 16)).eval()
    assert isinstance(restored.gate, GumbelGate)
    x = next(iter(data.val_dataloader()))[0]
    a, b = model.eval().encode(x), restored.encode(x)
    assert torch.equal(a.z, b.z) and torch.equal(a.mask, b.mask)


def test_ncl_topk_keeps_k_activations_per_sample() -> None:
    torch.manual_seed(0)
    model = NCLTopK(SmallCNN(1, 8, 16), proj_hidden_dim=32, proj_output_dim=12, topk=3).eval()
    p = model.projector(model.backbone(torch.randn(16, 1, 8, 8)))
    z = model.features(p)
    relu = torch.relu(p)
    expected = torch.where(relu >= relu.topk(3, dim=1).values[:, -1:], relu, torch.zeros_like(relu))
    torch.testing.assert_close(z, expected)
    assert ((z > 0).sum(dim=1) <= 3).all()
    with pytest.raises(ValueError, match=r"topk must be in \[1, 12\]"):
        NCLTopK(SmallCNN(1, 8, 16), proj_hidden_dim=32, proj_output_dim=12, topk=13)


def test_gating_head_has_no_batch_norm_so_train_and_eval_masks_agree() -> None:
    # The release's head is Linear-ReLU-Linear. With BatchNorm the eval mask reads running
    # statistics, so the same images can get another mask than in training.
    for batch_norm, agree in ((False, True), (True, False)):
        model = _model(gate_batch_norm=batch_norm)
        norms = [m for m in model.gating_head.modules() if isinstance(m, torch.nn.BatchNorm1d)]
        assert bool(norms) == batch_norm
        h = torch.randn(32, model.backbone.out_dim) * 3 + 1  # the same backbone features
        with torch.no_grad():
            model.train()
            train_mask = model.gate(model.gate_probs(h))
            model.eval()
            eval_mask = model.gate(model.gate_probs(h))
        assert torch.equal(train_mask, eval_mask) == agree


def test_kl_eps_reaches_the_kl_and_is_checked() -> None:
    model = _model(kl_eps=0.2)
    alpha = torch.full((4, model.projector.out_dim), 0.05)
    views = [model.encode(torch.randn(4, 1, 8, 8))._replace(alpha=alpha)] * 2
    expected = bernoulli_kl(torch.full_like(alpha, 0.2), 0.8, eps=0.0).sum(dim=1).mean()
    torch.testing.assert_close(model.kl(views), expected)
    with pytest.raises(ValueError, match=r"kl_eps must be in \[0, 0.5\)"):
        _model(kl_eps=0.5)
