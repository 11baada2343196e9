"""The captured LARS update (``LARS.capture``) against the eager one: the same parameters
and momentum buffers step after step while the learning rate moves every step, no
recompilation, and ``skip`` leaves everything as it was."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from ncl_lightning.optim import LARS


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3))


def _optimizer(model: nn.Module, nesterov: bool = False) -> LARS:
    decay = [p for p in model.parameters() if p.ndim > 1]
    other = [p for p in model.parameters() if p.ndim <= 1]
    return LARS(
        [{"params": decay}, {"params": other, "weight_decay": 0.0, "lars_exclude": True}],
        lr=0.3, momentum=0.9, weight_decay=1e-4, eta=0.02, nesterov=nesterov,
    )  # fmt: skip


def _run(model: nn.Module, opt: LARS, steps: int, skip_at: int | None = None) -> list[float]:
    gen = torch.Generator().manual_seed(1)
    losses = []
    for step in range(steps):
        for group in opt.param_groups:  # a schedule that moves every step
            group["lr"] = 0.3 * (1.0 - step / (steps + 1))
        x = torch.randn(16, 6, generator=gen)
        loss = model(x).square().mean()
        opt.zero_grad()
        loss.backward()
        skip = None
        if opt.captured:
            skip = torch.tensor(step == skip_at)
        elif step == skip_at:
            continue
        opt.step(skip=skip) if skip is not None else opt.step()
        losses.append(float(loss.detach()))
    return losses


@pytest.mark.parametrize("nesterov", [False, True])
def test_captured_update_matches_the_eager_one(nesterov: bool) -> None:
    eager = _model()
    captured = copy.deepcopy(eager)
    opt_e, opt_c = _optimizer(eager, nesterov), _optimizer(captured, nesterov)
    opt_c.capture("default", compile=False)
    _run(eager, opt_e, 12, skip_at=4)
    _run(captured, opt_c, 12, skip_at=4)
    for a, b in zip(eager.parameters(), captured.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    for a, b in zip(eager.parameters(), captured.parameters(), strict=True):
        torch.testing.assert_close(
            opt_e.state[a]["momentum_buffer"], opt_c.state[b]["momentum_buffer"],
            rtol=1e-5, atol=1e-6,
        )  # fmt: skip


def test_skip_leaves_parameters_and_buffers_unchanged_even_with_nan_gradients() -> None:
    model = _model()
    opt = _optimizer(model)
    opt.capture("default", compile=False)
    _run(model, opt, 2)
    before = [p.detach().clone() for p in model.parameters()]
    bufs = [opt.state[p]["momentum_buffer"].clone() for p in model.parameters()]
    for p in model.parameters():
        p.grad = torch.full_like(p, float("nan"))
    opt.step(skip=torch.tensor(True))
    for p, b, m in zip(model.parameters(), before, bufs, strict=True):
        assert torch.equal(p, b)
        assert torch.equal(opt.state[p]["momentum_buffer"], m)


@pytest.mark.slow
def test_compiled_update_has_no_break_and_never_recompiles_as_the_lr_moves() -> None:
    torch._dynamo.reset()
    eager = _model()
    compiled = copy.deepcopy(eager)
    opt_e, opt_c = _optimizer(eager), _optimizer(compiled)
    opt_c.capture("default")
    from torch._dynamo.utils import counters

    counters.clear()
    _run(eager, opt_e, 30)
    _run(compiled, opt_c, 30)
    assert counters["stats"]["unique_graphs"] == 1, dict(counters["stats"])
    assert not counters["graph_break"], dict(counters["graph_break"])
    for a, b in zip(eager.parameters(), compiled.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
