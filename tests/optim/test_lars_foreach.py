"""The multi-tensor LARS against the per-parameter loop it replaced (issue 32).

``LoopLARS`` keeps the old ``LARS.step``: a slow, obvious Python loop over the tensors,
one trust ratio at a time. The multi-tensor ``LARS`` must give the same parameters and
momentum buffers, share its state format, and dispatch a number of operators per step
that does not grow with the number of tensors.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import Tensor, nn
from torch.utils._python_dispatch import TorchDispatchMode

from ncl_lightning.methods import NCL
from ncl_lightning.nn import ResNet
from ncl_lightning.optim import LARS

TOL = {torch.float32: {"rtol": 1e-6, "atol": 1e-7}, torch.float64: {"rtol": 1e-12, "atol": 1e-14}}


class LoopLARS(LARS):
    """The per-parameter ``LARS.step`` of before issue 32, kept as the reference."""

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            lr, wd, momentum = group["lr"], group["weight_decay"], group["momentum"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad
                update = grad.add(p, alpha=wd) if wd != 0.0 else grad.clone()
                adapt = not group["lars_exclude"] and not (
                    group["exclude_bias_n_norm"] and p.ndim <= 1
                )
                if adapt:
                    update.mul_(self._loop_ratio(p, grad, lr, wd, group["eta"], group["clip_lr"]))
                if momentum != 0.0:
                    state = self.state[p]
                    buf = state.get("momentum_buffer")
                    if buf is None:
                        buf = state["momentum_buffer"] = update.clone()
                    else:
                        buf.mul_(momentum).add_(update)
                    update = update.add(buf, alpha=momentum) if group["nesterov"] else buf
                p.add_(update, alpha=-lr)

    @staticmethod
    def _loop_ratio(p, grad, lr, wd, eta, clip_lr):
        p_norm = torch.linalg.vector_norm(p)
        g_norm = torch.linalg.vector_norm(grad)
        ratio = eta * p_norm / (g_norm + wd * p_norm)
        ratio = torch.where((p_norm > 0) & (g_norm > 0), ratio, torch.ones_like(ratio))
        if clip_lr and lr > 0.0:
            ratio = torch.clamp(ratio / lr, max=1.0)
        return ratio


class OpCounter(TorchDispatchMode):
    """Counts the ATen operators dispatched while active."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += 1
        return func(*args, **(kwargs or {}))


def mixed_params(dtype: torch.dtype) -> list[nn.Parameter]:
    """Weights (2-D, 4-D), a bias, a zero weight, and the rest random, all in ``dtype``."""
    gen = torch.Generator().manual_seed(0)
    shapes = [(6, 5), (4, 3, 3, 3), (5,), (3, 4), (7,), (2, 2)]
    params = [nn.Parameter(torch.randn(s, generator=gen, dtype=dtype)) for s in shapes]
    params[3].data.zero_()  # ||p|| = 0: ratio 1
    return params


def grads_for(params: list[Tensor], step: int) -> list[Tensor | None]:
    """Random gradients; tensor 4 has a zero gradient, tensor 5 none on even steps."""
    gen = torch.Generator().manual_seed(100 + step)
    grads = [torch.randn(p.shape, generator=gen, dtype=p.dtype) for p in params]
    if len(grads) > 5:
        grads[4].zero_()  # ||g|| = 0: ratio 1
        grads[5] = None if step % 2 == 0 else grads[5]
    return grads


def twins(groups: list[dict], **kwargs) -> tuple[LARS, LoopLARS]:
    """A multi-tensor LARS and a loop LARS on independent copies of the same groups."""
    copies = [{**g, "params": [copy.deepcopy(p) for p in g["params"]]} for g in groups]
    return LARS(groups, **kwargs), LoopLARS(copies, **kwargs)


def feed(opt: LARS, step: int) -> None:
    """Give ``opt``'s parameters the gradients of ``step``."""
    params = [p for g in opt.param_groups for p in g["params"]]
    for p, g in zip(params, grads_for(params, step), strict=True):
        p.grad = None if g is None else g.clone()


def run_and_compare(new: LARS, ref: LoopLARS, steps: int, start: int = 0) -> None:
    """``steps`` steps with the same gradients; params and buffers must match each step."""
    new_params = [p for g in new.param_groups for p in g["params"]]
    ref_params = [p for g in ref.param_groups for p in g["params"]]
    for step in range(start, start + steps):
        feed(new, step)
        feed(ref, step)
        grads = [None if p.grad is None else p.grad.clone() for p in new_params]
        new.step()
        ref.step()
        for p, g in zip(new_params, grads, strict=True):
            assert g is None or torch.equal(p.grad, g)  # the gradients are left as they were
        for a, b in zip(new_params, ref_params, strict=True):
            tol = TOL[a.dtype]
            torch.testing.assert_close(a.detach(), b.detach(), **tol)
            assert (a in new.state) == (b in ref.state)  # no state for a missing gradient
            if "momentum_buffer" in ref.state.get(b, {}):
                buf, ref_buf = new.state[a]["momentum_buffer"], ref.state[b]["momentum_buffer"]
                torch.testing.assert_close(buf, ref_buf, **tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(
    ("wd", "momentum", "nesterov", "clip_lr", "exclude_bias_n_norm", "lars_exclude"),
    [
        (0.0, 0.9, False, True, False, False),
        (1e-2, 0.9, False, True, False, False),
        (1e-2, 0.9, True, False, False, False),
        (5e-2, 0.0, False, True, True, False),
        (0.0, 0.9, True, True, True, False),
        (1e-2, 0.9, False, False, True, False),
        (1e-2, 0.5, True, True, False, True),
        (0.0, 0.0, False, False, False, True),
    ],
)
def test_matches_the_loop(
    dtype, wd, momentum, nesterov, clip_lr, exclude_bias_n_norm, lars_exclude
):
    groups = [{"params": mixed_params(dtype), "lars_exclude": lars_exclude}]
    kwargs = {
        "lr": 0.4,
        "momentum": momentum,
        "weight_decay": wd,
        "eta": 0.02,
        "clip_lr": clip_lr,
        "exclude_bias_n_norm": exclude_bias_n_norm,
        "nesterov": nesterov,
    }
    new, ref = twins(groups, **kwargs)
    run_and_compare(new, ref, steps=5)
    if momentum == 0.0:
        assert not any(new.state.values())


def test_several_groups_with_their_own_lrs_and_mixed_dtypes():
    p32, p64 = mixed_params(torch.float32), mixed_params(torch.float64)
    groups = [
        {"params": [p32[0], p64[1], p32[3], p64[5]]},  # two (device, dtype) buckets
        {"params": [p32[2], p64[2], p32[4]], "weight_decay": 0.0, "lars_exclude": True},
        {"params": [p64[0], p32[1]], "lr": 0.05, "nesterov": True, "clip_lr": False},
    ]
    new, ref = twins(groups, lr=0.3, momentum=0.9, weight_decay=1e-3, exclude_bias_n_norm=True)
    for group in new.param_groups + ref.param_groups:
        group["lr"] *= 0.5  # a scheduler changes the rates between steps
    run_and_compare(new, ref, steps=4)


@pytest.fixture(scope="module")
def resnet_groups() -> list[dict]:
    """The optimiser groups of NCL on a CIFAR ResNet-18 (66 tensors, three groups)."""
    torch.manual_seed(0)
    model = NCL(ResNet(18, "cifar"), proj_hidden_dim=64, proj_output_dim=32, num_classes=10)
    return model.param_groups()


def test_matches_the_loop_on_the_resnet18_method_groups(resnet_groups):
    groups = [{**g, "params": [copy.deepcopy(p) for p in g["params"]]} for g in resnet_groups]
    assert sum(len(g["params"]) for g in groups) == 66
    new, ref = twins(groups, lr=0.3, momentum=0.9, weight_decay=1e-4, eta=0.02, clip_lr=True)
    run_and_compare(new, ref, steps=3)


def test_loads_a_loop_state_dict_and_continues_identically():
    kwargs = {"lr": 0.2, "momentum": 0.9, "weight_decay": 1e-3, "nesterov": True}
    ref = LoopLARS(mixed_params(torch.float32), **kwargs)
    for step in range(3):
        feed(ref, step)
        ref.step()
    saved = ref.state_dict()  # what a checkpoint of the loop version holds
    assert len(saved["state"]) == 6
    assert all(set(s) == {"momentum_buffer"} for s in saved["state"].values())
    resumed = LARS([copy.deepcopy(p) for p in ref.param_groups[0]["params"]], **kwargs)
    resumed.load_state_dict(copy.deepcopy(saved))
    run_and_compare(resumed, ref, steps=3, start=3)
    assert resumed.state_dict()["state"].keys() == ref.state_dict()["state"].keys()


def ops_per_step(opt: LARS, params: list[Tensor]) -> int:
    """Operators dispatched by one steady-state ``step()`` (after two warm-up steps)."""
    for p in params:
        p.grad = torch.randn_like(p)
    opt.step()
    opt.step()
    with OpCounter() as counter:
        opt.step()
    return counter.count


def stack_of(n: int) -> list[dict]:
    """``n`` tensors: weights in an adapted group, biases in an excluded one."""
    weights = [nn.Parameter(torch.randn(8, 4)) for _ in range(n // 2)]
    biases = [nn.Parameter(torch.randn(8)) for _ in range(n - n // 2)]
    return [{"params": weights}, {"params": biases, "weight_decay": 0.0, "lars_exclude": True}]


@pytest.mark.parametrize("nesterov", [False, True])
def test_operators_per_step_do_not_grow_with_the_tensors(nesterov):
    counts = {}
    for n in (10, 60):
        for cls in (LARS, LoopLARS):
            groups = stack_of(n)
            params = [p for g in groups for p in g["params"]]
            opt = cls(groups, lr=0.3, weight_decay=1e-4, nesterov=nesterov)
            counts[cls, n] = ops_per_step(opt, params)
    assert counts[LARS, 60] == counts[LARS, 10] < 40
    assert counts[LoopLARS, 60] > counts[LoopLARS, 10] + 5 * 50  # the loop: ~9 per tensor


def test_resnet18_step_dispatches_a_small_constant_number_of_operators(resnet_groups):
    groups = [{**g, "params": [copy.deepcopy(p) for p in g["params"]]} for g in resnet_groups]
    params = [p for g in groups for p in g["params"]]
    count = ops_per_step(LARS(groups, lr=0.3, weight_decay=1e-4), params)
    assert count < 40


def test_step_never_reads_tensor_values_on_the_host():
    # Meta tensors have no values: an .item(), a bool() or a data-dependent shape raises.
    groups = [
        {"params": [nn.Parameter(torch.empty(4, 3, device="meta")) for _ in range(3)]},
        {"params": [nn.Parameter(torch.empty(3, device="meta"))], "lars_exclude": True},
    ]
    opt = LARS(groups, lr=0.3, weight_decay=1e-4, nesterov=True)
    for group in groups:
        for p in group["params"]:
            p.grad = torch.empty_like(p)
    opt.step()
    opt.step()
    assert all(s["momentum_buffer"].is_meta for s in opt.state.values())
