"""BayesNCL's gating head is optimised as in the release (``Cui-Peng-624/BayesNCL``,
solo-learn): ``gate_lr`` is not scaled by the batch, the head's weights get weight decay
and LARS adaptation, its biases neither. Checked against slow, obvious references."""

from __future__ import annotations

import math
from pathlib import Path

import lightning as L
import pytest
import torch

from ncl_lightning.data import DigitsDataModule
from ncl_lightning.methods import BayesNCL
from ncl_lightning.nn import SmallCNN
from ncl_lightning.optim import LARS
from tests.methods.test_batch_lr import LOADER, fit_batch_lines

BASE_LR, PROBE_LR, GATE_LR, WD, ETA, MOMENTUM = 0.4, 0.1, 0.1, 1e-4, 0.02, 0.9


def _lars(params) -> LARS:
    return LARS(params, lr=BASE_LR, momentum=MOMENTUM, weight_decay=WD, eta=ETA, clip_lr=True)


def _model(**kw) -> BayesNCL:
    torch.manual_seed(0)
    return BayesNCL(
        SmallCNN(1, 8, 16), proj_hidden_dim=32, proj_output_dim=12, num_classes=10,
        probe_lr=PROBE_LR, gate_lr=GATE_LR, optimizer=_lars, scale_lr=True, **kw,
    )  # fmt: skip


def _is_gate(model: BayesNCL, params: list[torch.Tensor]) -> bool:
    gate = {id(p) for p in model.gating_head.parameters()}
    ids = {id(p) for p in params}
    assert ids <= gate or not ids & gate, "a group mixes the gating head with other modules"
    return ids <= gate


def test_gate_lr_is_the_configured_rate_at_batch_128_while_the_others_scale(
    tmp_path: Path,
) -> None:
    model = _model()
    trainer = L.Trainer(
        accelerator="cpu", max_epochs=1, limit_train_batches=1, limit_val_batches=0,
        logger=False, enable_progress_bar=False, enable_model_summary=False,
        enable_checkpointing=False, default_root_dir=tmp_path,
    )  # fmt: skip
    lines = fit_batch_lines(trainer, model, DigitsDataModule(batch_size=128, num_workers=0))
    groups = trainer.optimizers[0].param_groups
    # The reference: the gate's configured rate; every other rate x 128/256.
    probe = {id(p) for p in model.online.parameters()}
    expected = []
    for group in groups:
        if _is_gate(model, group["params"]):
            expected.append(GATE_LR)
        elif {id(p) for p in group["params"]} <= probe:
            expected.append(PROBE_LR * 128 / 256)
        else:
            expected.append(BASE_LR * 128 / 256)
    peaks = [group["initial_lr"] for group in groups]
    assert peaks == pytest.approx(expected, rel=1e-12)
    assert sum(_is_gate(model, g["params"]) for g in groups) == 2  # weights, biases
    assert sum(not _is_gate(model, g["params"]) for g in groups) == 3
    assert lines == [
        "Batch: 1 process (1 node x 1 device) x 128 per device = global batch 128 "
        "(batch_scope: device); learning rates 0.4, 0.1 -> 0.2, 0.05 (x 128/256, lr scaled "
        "by global batch / 256); learning rate 0.1 not scaled (their groups set scale_lr "
        "false)" + LOADER
    ]


def _reference_step(p: list[float], g: list[float], lr: float, wd: float, lars: bool):
    """One first step (momentum buffer = update) of solo-learn's LARS on one tensor,
    element by element: ``ratio = min(eta ||p|| / (||g|| + wd ||p||) / lr, 1)``,
    ``p - lr * ratio * (g + wd p)``; without ``lars`` plain SGD without decay."""
    if not lars:
        return [pi - lr * gi for pi, gi in zip(p, g, strict=True)]
    p_norm, g_norm = math.sqrt(sum(v * v for v in p)), math.sqrt(sum(v * v for v in g))
    ratio = min(ETA * p_norm / (g_norm + wd * p_norm) / lr, 1.0)
    return [pi - lr * ratio * (gi + wd * pi) for pi, gi in zip(p, g, strict=True)]


def test_one_lars_step_adapts_the_gate_weights_and_leaves_its_biases_alone() -> None:
    model = _model().double()
    optimizer = _lars(model.param_groups())
    torch.manual_seed(1)
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    linears = [m for m in model.gating_head.modules() if isinstance(m, torch.nn.Linear)]
    before = {id(p): (p.detach().flatten().tolist(), p.grad.flatten().tolist())
              for m in linears for p in (m.weight, m.bias)}  # fmt: skip
    optimizer.step()
    for m in linears:
        for p, lars in ((m.weight, True), (m.bias, False)):
            values, grads = before[id(p)]
            expected = _reference_step(values, grads, GATE_LR, WD, lars)
            torch.testing.assert_close(p.detach().flatten().tolist(), expected, rtol=0, atol=1e-12)
        # The trust ratio is active (not clipped to 1): the weights' step is not SGD's.
        values, grads = before[id(m.weight)]
        sgd = [v - GATE_LR * (g + WD * v) for v, g in zip(values, grads, strict=True)]
        assert max(abs(a - b) for a, b in zip(m.weight.flatten().tolist(), sgd, strict=True)) > 1e-3


def test_the_gate_groups_without_exclude_bias_n_norm() -> None:
    # Like every other module: one group, weight decay and LARS on all its parameters.
    model = _model(exclude_bias_n_norm=False)
    gate = [g for g in model.param_groups() if _is_gate(model, g["params"])]
    assert len(gate) == 1 and gate[0]["lr"] == GATE_LR and gate[0]["scale_lr"] is False
    assert "weight_decay" not in gate[0] and not gate[0].get("lars_exclude", False)
    assert len(gate[0]["params"]) == len(list(model.gating_head.parameters()))
