"""LARS against a slow, obvious per-element reference of You et al. (2017)."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from ncl_lightning.optim import LARS, split_decay_params


def reference_lars_step(params, grads, bufs, *, lr, momentum, wd, eta, clip, exclude, nesterov):
    """Return new params/buffers as nested python lists, one element at a time."""
    new_params, new_bufs = [], []
    for p, g, buf, excl in zip(params, grads, bufs, exclude, strict=True):
        p_list, g_list = p.flatten().tolist(), g.flatten().tolist()
        p_norm = math.sqrt(sum(v * v for v in p_list))
        g_norm = math.sqrt(sum(v * v for v in g_list))
        ratio = 1.0
        if not excl and p_norm > 0 and g_norm > 0:
            ratio = eta * p_norm / (g_norm + wd * p_norm)
            if clip:
                ratio = min(ratio / lr, 1.0)
        d = [(gi + wd * pi) * ratio for pi, gi in zip(p_list, g_list, strict=True)]
        b = list(d) if buf is None else [momentum * bi + di for bi, di in zip(buf, d, strict=True)]
        step = [di + momentum * bi for di, bi in zip(d, b, strict=True)] if nesterov else b
        new_params.append([pi - lr * si for pi, si in zip(p_list, step, strict=True)])
        new_bufs.append(b)
    return new_params, new_bufs


@pytest.mark.parametrize(
    ("clip", "wd", "nesterov", "exclude_second"),
    [
        (True, 0.0, False, False),
        (True, 1e-2, False, True),
        (False, 1e-2, False, False),
        (False, 0.0, True, True),
        (True, 5e-2, True, False),
    ],
)
def test_lars_matches_reference(clip, wd, nesterov, exclude_second):
    torch.manual_seed(0)
    w = nn.Parameter(torch.randn(4, 3, dtype=torch.float64))
    b = nn.Parameter(torch.randn(3, dtype=torch.float64))
    lr, momentum, eta = 0.5, 0.9, 0.02
    opt = LARS(
        [{"params": [w]}, {"params": [b], "lars_exclude": exclude_second}],
        lr=lr,
        momentum=momentum,
        weight_decay=wd,
        eta=eta,
        clip_lr=clip,
        nesterov=nesterov,
    )
    ref_params = [w.detach().clone(), b.detach().clone()]
    ref_bufs = [None, None]
    for _ in range(3):
        grads = [torch.randn_like(w), torch.randn_like(b)]
        w.grad, b.grad = grads[0].clone(), grads[1].clone()
        opt.step()
        new, ref_bufs = reference_lars_step(
            ref_params,
            grads,
            ref_bufs,
            lr=lr,
            momentum=momentum,
            wd=wd,
            eta=eta,
            clip=clip,
            exclude=[False, exclude_second],
            nesterov=nesterov,
        )
        ref_params = [
            torch.tensor(v, dtype=torch.float64).view_as(p)
            for v, p in zip(new, (w, b), strict=True)
        ]
        torch.testing.assert_close(w.detach(), ref_params[0])
        torch.testing.assert_close(b.detach(), ref_params[1])


def test_exclude_bias_n_norm_skips_trust_ratio_for_1d():
    torch.manual_seed(0)
    b = nn.Parameter(torch.randn(5))
    opt = LARS([b], lr=0.1, momentum=0.0, eta=0.02, exclude_bias_n_norm=True)
    before = b.detach().clone()
    b.grad = torch.randn(5)
    opt.step()
    torch.testing.assert_close(b.detach(), before - 0.1 * b.grad)  # plain SGD step


def test_clip_saturates_at_global_lr():
    # Tiny gradient -> huge trust ratio -> clipped to 1: a plain momentum-SGD step.
    w = nn.Parameter(torch.ones(2, 2))
    opt = LARS([w], lr=0.1, momentum=0.0, eta=0.02, clip_lr=True)
    w.grad = torch.full((2, 2), 1e-6)
    opt.step()
    torch.testing.assert_close(w.detach(), torch.full((2, 2), 1.0 - 0.1e-6))


def test_zero_param_norm_uses_unit_ratio():
    w = nn.Parameter(torch.zeros(3, 2))
    opt = LARS([w], lr=0.1, momentum=0.0, weight_decay=0.1)
    w.grad = torch.ones(3, 2)
    opt.step()
    torch.testing.assert_close(w.detach(), torch.full((3, 2), -0.1))


def test_skips_params_without_grad_and_returns_closure_loss():
    w = nn.Parameter(torch.ones(2, 2))
    opt = LARS([w], lr=0.1)
    assert opt.step(lambda: 3.0) == 3.0
    torch.testing.assert_close(w.detach(), torch.ones(2, 2))


def test_lars_minimises_quadratic():
    torch.manual_seed(0)
    target = torch.randn(8, 4)
    w = nn.Parameter(torch.randn(8, 4))
    opt = LARS([w], lr=1.0, momentum=0.9, eta=0.02, clip_lr=True)
    start = ((w - target) ** 2).sum().item()
    for _ in range(300):
        opt.zero_grad()
        loss = ((w - target) ** 2).sum()
        loss.backward()
        opt.step()
    assert loss.item() < 1e-2 * start


def test_works_with_decay_groups():
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 1))
    decay, no_decay = split_decay_params(model)
    groups = [{"params": decay}, {"params": no_decay, "weight_decay": 0.0, "lars_exclude": True}]
    opt = LARS(groups, lr=0.3, weight_decay=1e-4)
    assert isinstance(opt, LARS)
    assert [g["lars_exclude"] for g in opt.param_groups] == [False, True]
    assert [g["weight_decay"] for g in opt.param_groups] == [1e-4, 0.0]
    model(torch.randn(6, 3)).sum().backward()
    opt.step()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"lr": -1.0}, "lr"),
        ({"lr": 0.1, "momentum": 1.0}, "momentum"),
        ({"lr": 0.1, "momentum": -0.1}, "momentum"),
        ({"lr": 0.1, "eta": 0.0}, "eta"),
        ({"lr": 0.1, "weight_decay": -1e-4}, "weight_decay"),
        ({"lr": 0.1, "momentum": 0.0, "nesterov": True}, "nesterov"),
    ],
)
def test_lars_rejects_bad_args(kwargs, match):
    with pytest.raises(ValueError, match=match):
        LARS([nn.Parameter(torch.ones(1))], **kwargs)
