"""SimSiam's stop-gradient and BYOL's exact EMA target, on the sparse-coding data."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import pytest
import torch

from ncl_lightning.data import SparseCodingDataModule
from ncl_lightning.losses import negative_cosine
from ncl_lightning.methods import BYOL, Encoded, SimSiam
from ncl_lightning.methods.byol import ema_decay_at
from ncl_lightning.nn import SmallCNN, SparseCodingEncoder


def _data(**kw) -> SparseCodingDataModule:
    kw.setdefault("n", 64)
    kw.setdefault("batch_size", 16)
    kw.setdefault("val_n", 32)
    return SparseCodingDataModule(p=12, d=4, **kw)


def _trainer(tmp_path: Path, **kw) -> L.Trainer:
    kw.setdefault("max_epochs", 1)
    return L.Trainer(
        accelerator="cpu",
        devices=1,
        default_root_dir=tmp_path,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        **kw,
    )


def _sgd(params):
    return torch.optim.SGD(params, lr=0.1)


def _byol(**kw) -> BYOL:
    kw.setdefault("ema_decay", 0.9)
    return BYOL(
        SparseCodingEncoder(12, 8, bias_init=0.1),
        proj_num_layers=1,
        proj_hidden_dim=8,
        proj_output_dim=6,
        pred_num_layers=1,
        optimizer=_sgd,
        scale_lr=False,
        warmup_epochs=0,
        **kw,
    )


def test_simsiam_gradient_flows_through_the_predictor_branch_only() -> None:
    torch.manual_seed(0)
    model = SimSiam(SparseCodingEncoder(12, 8), proj_num_layers=0, pred_num_layers=1)
    z1 = torch.randn(5, 8, requires_grad=True)
    z2 = torch.randn(5, 8, requires_grad=True)
    views = [Encoded(h=z1, z=z1), Encoded(h=z2, z=z2)]
    model.objective(views).backward()
    # Reference: the same loss with the targets replaced by constants.
    a, b = z1.detach().requires_grad_(), z2.detach().requires_grad_()
    q = model.predictor
    ref = 0.5 * (negative_cosine(q(a), z2.detach()) + negative_cosine(q(b), z1.detach()))
    ref.backward()
    assert torch.allclose(z1.grad, a.grad, atol=1e-6)
    assert torch.allclose(z2.grad, b.grad, atol=1e-6)


def test_simsiam_without_projector_or_predictor_compares_encoder_outputs() -> None:
    model = SimSiam(SparseCodingEncoder(12, 8), proj_num_layers=0, pred_num_layers=0).eval()
    x = torch.randn(4, 12)
    out = model.encode(x)
    assert torch.equal(out.z, out.h)
    assert isinstance(model.predictor, torch.nn.Identity)
    with pytest.raises(ValueError, match="pred_num_layers must be >= 0"):
        SimSiam(SparseCodingEncoder(12, 8), pred_num_layers=-1)
    with pytest.raises(ValueError, match="expects 2 views"):
        model.objective([out])


def test_simsiam_image_defaults_build() -> None:
    model = SimSiam(SmallCNN(1, 8, 16), proj_hidden_dim=32, proj_output_dim=24, pred_hidden_dim=8)
    assert model.projector.out_dim == 24
    out = model.encode(torch.randn(3, 1, 8, 8))
    assert out.z.shape == (3, 24) and model.predictor(out.z).shape == (3, 24)


def test_ema_decay_schedule() -> None:
    assert ema_decay_at(0.99, 0, 100, "cosine") == pytest.approx(0.99)
    assert ema_decay_at(0.99, 50, 100, "cosine") == pytest.approx(0.995)
    assert ema_decay_at(0.99, 100, 100, "cosine") == pytest.approx(1.0)
    assert ema_decay_at(0.99, 50, 100, "constant") == 0.99


def test_byol_target_is_frozen_and_starts_as_a_copy() -> None:
    model = _byol()
    for online, target in model._online_target_pairs():
        for o, t in zip(online.parameters(), target.parameters(), strict=True):
            assert torch.equal(o, t) and not t.requires_grad
    trainable = {id(p) for g in model.param_groups() for p in g["params"]}
    assert not any(id(p) in trainable for p in model.target_backbone.parameters())
    assert any(k.startswith("target_backbone.") for k in model.state_dict())
    with pytest.raises(ValueError, match="ema_decay must be in"):
        _byol(ema_decay=1.5)
    with pytest.raises(ValueError, match="ema_schedule"):
        _byol(ema_schedule="linear")


class _CheckEMA(L.Callback):
    """After each optimiser step (before BYOL's update) snapshot target and online weights;
    at the next batch check ``ξ = τ ξ_before + (1 - τ) θ``."""

    def __init__(self) -> None:
        self.pending: tuple | None = None
        self.checked = 0
        self.steps_seen: list[int] = []

    @staticmethod
    def _flat(module: torch.nn.Module) -> torch.Tensor:
        return torch.cat([p.detach().flatten().clone() for p in module.parameters()])

    def _snapshot(self, model: BYOL) -> tuple:
        return (
            self._flat(model.target_backbone),
            self._flat(model.backbone),
            model.current_ema_decay(),
        )

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        last = self.steps_seen[-1] if self.steps_seen else 0
        if trainer.global_step != last:
            self.steps_seen.append(trainer.global_step)
            self.pending = self._snapshot(pl_module)

    def _check(self, model: BYOL) -> None:
        if self.pending is None:
            return
        target_before, online, tau = self.pending
        expected = tau * target_before + (1 - tau) * online
        assert torch.allclose(self._flat(model.target_backbone), expected, atol=1e-7)
        self.checked += 1
        self.pending = None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._check(pl_module)

    def on_train_end(self, trainer, pl_module) -> None:
        self._check(pl_module)


@pytest.mark.parametrize("accumulate", [1, 2])
def test_byol_ema_update_is_exact_once_per_optimiser_step(tmp_path: Path, accumulate: int) -> None:
    torch.manual_seed(0)
    model = _byol(ema_schedule="cosine")
    check = _CheckEMA()
    trainer = _trainer(
        tmp_path, max_epochs=2, callbacks=[check], accumulate_grad_batches=accumulate
    )
    trainer.fit(model, _data())
    steps = 2 * 4 // accumulate  # 64 samples / batch 16 = 4 batches per epoch
    assert trainer.global_step == steps
    assert check.checked == steps  # one update per optimiser step, each exact
    assert not torch.equal(
        torch.cat([p.flatten() for p in model.target_backbone.parameters()]),
        torch.cat([p.flatten() for p in model.backbone.parameters()]),
    )


def test_byol_target_survives_a_checkpoint(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = _byol()
    trainer = _trainer(tmp_path)
    trainer.fit(model, _data())
    path = tmp_path / "byol.ckpt"
    trainer.save_checkpoint(path)
    state = torch.load(path, weights_only=True)["state_dict"]
    for name, value in model.state_dict().items():
        if name.startswith("target_"):
            assert torch.equal(state[name], value)
