"""LARS: SGD with momentum and layer-wise adaptive rate scaling (You, Gitman & Ginsburg,
"Large Batch Training of Convolutional Networks", 2017), as used for SimCLR and solo-learn."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import Tensor
from torch.optim import Optimizer

from ncl_lightning.foundation.errors import ConfigError, UsageError
from ncl_lightning.foundation.validation import check_at_least, check_positive, check_range

_Split = tuple[list[Tensor], list[Tensor]]  # (adapted, other) parameters


class LARS(Optimizer):
    """SGD + momentum with layer-wise adaptive rate scaling (You et al., 2017).

    For every parameter ``p`` with gradient ``g`` in a group that is not excluded:

    * ``ratio = eta * ||p|| / (||g|| + weight_decay * ||p||)`` if both norms are > 0,
      else ``1``; with ``clip_lr`` the ratio becomes ``min(ratio / lr, 1)`` so the
      adaptive rate never exceeds the global learning rate (SimCLR / solo-learn).
    * ``d = (g + weight_decay * p) * ratio``
    * ``buf = momentum * buf + d`` (``buf = d`` on the first step); ``d = d + momentum *
      buf`` (Nesterov) or ``buf``
    * ``p = p - lr * d``

    Multi-tensor: [`step`][] updates all the parameters of a group (per device and
    dtype) with a constant number of ``torch._foreach_*`` calls and never synchronises
    with the host. Parameters whose ``grad`` is ``None`` are skipped (no state is
    created); the momentum buffer is ``state["momentum_buffer"]``, as in the per-tensor
    version, so its checkpoints load.

    **Captured** ([`capture`][]): the update runs as one ``torch.compile`` graph over every
    group, with the learning rate, weight decay and momentum of each group passed as one
    ``[groups, 3]`` device tensor each step (one host-to-device copy), so a schedule that
    moves them never recompiles; momentum buffers exist from the first step (zeros: the
    same first step as ``buf = d``); and ``step(skip=...)`` takes a 0-d bool tensor that
    leaves every parameter and buffer as it was where it is ``True`` (a non-finite step
    is never applied), decided on the device with no host read.

    Groups with ``lars_exclude=True`` (e.g. biases and normalisation parameters, or a
    linear-probe head) skip the trust ratio and get plain SGD with momentum and their
    group's weight decay. Every constructor argument is also a per-group key.

    Args:
        params: Parameters or parameter groups (dicts; may set ``lars_exclude``).
        lr: Learning rate (> 0; a schedule may still take a group's rate to 0).
        momentum: Momentum factor in ``[0, 1)``.
        weight_decay: L2 penalty added to the gradient before scaling (>= 0).
        eta: Trust coefficient (> 0).
        clip_lr: Clip the adaptive rate at the global learning rate.
        exclude_bias_n_norm: Skip the trust ratio for 1-D tensors (biases and
            normalisation affine parameters). Their weight decay is still the group's;
            give them a group with ``weight_decay=0`` (``SSLMethod.param_groups`` does).
        nesterov: Use Nesterov momentum (requires ``momentum > 0``).
    """

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict[str, Any]],
        lr: float,
        momentum: float = 0.9,
        weight_decay: float = 0.0,
        eta: float = 0.02,
        clip_lr: bool = True,
        exclude_bias_n_norm: bool = False,
        nesterov: bool = False,
    ) -> None:
        check_positive("LARS lr", lr)
        check_range("LARS momentum", momentum, 0, 1, closed="[)")
        check_at_least("LARS weight_decay", weight_decay, 0)
        check_positive("LARS eta", eta)
        if nesterov and momentum == 0.0:
            raise ConfigError("LARS nesterov=True requires momentum > 0, got momentum=0.0")
        defaults = {
            "lr": lr,
            "momentum": momentum,
            "weight_decay": weight_decay,
            "eta": eta,
            "clip_lr": clip_lr,
            "exclude_bias_n_norm": exclude_bias_n_norm,
            "nesterov": nesterov,
            "lars_exclude": False,
        }
        super().__init__(params, defaults)
        self._captured: Callable[..., None] | None = None
        self._marked = False

    def capture(self, mode: str | None, *, compile: bool = True) -> None:
        """Run [`step`][] as one graph of tensor hyper-parameters from now on.

        Args:
            mode: ``torch.compile`` mode (``"default"``, ``"reduce-overhead"`` for CUDA
                graphs, ...); ``None``: back to the eager update.
            compile: ``False`` runs the captured update's function eagerly (the same
                arithmetic, for odd shapes and comparisons).
        """
        if mode is None:
            self._captured = None
            return
        fn = captured_update
        if compile:
            fn = torch.compile(fn, fullgraph=True, dynamic=False,
                               mode=None if mode == "default" else mode)  # fmt: skip
        self._captured = fn
        self._marked = False  # momentum buffers marked static at the first captured step

    @property
    def captured(self) -> bool:
        """Whether [`capture`][] is on."""
        return self._captured is not None

    @torch.no_grad()
    def step(  # type: ignore[override]
        self, closure: Callable[[], float] | None = None, skip: Tensor | None = None
    ) -> float | None:
        """Perform one optimisation step: a few ``torch._foreach_*`` calls per group.

        Args:
            closure: Optional callable that re-evaluates the model and returns the loss.
            skip: Captured update only: a 0-d bool device tensor; ``True`` leaves the
                parameters and momentum buffers unchanged.

        Returns:
            The loss returned by ``closure``, if given.
        """
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if self._captured is not None:
            self._captured_step(skip)
            return loss
        if skip is not None:
            raise UsageError("LARS.step(skip=...) needs the captured update (LARS.capture)")
        for group in self.param_groups:
            # (device, dtype) -> (adapted, other): torch's foreach optimisers group alike.
            buckets: dict[tuple[torch.device, torch.dtype], _Split] = {}
            for p in group["params"]:
                if p.grad is None:
                    continue
                adapt = not group["lars_exclude"] and not (
                    group["exclude_bias_n_norm"] and p.ndim <= 1
                )
                buckets.setdefault((p.device, p.dtype), ([], []))[0 if adapt else 1].append(p)
            for adapted, other in buckets.values():
                self._update(group, adapted + other, len(adapted))
        return loss

    def _captured_step(self, skip: Tensor | None) -> None:
        """One call of the captured update over every group (parameters with a gradient;
        momentum buffers created as zeros on their first step)."""
        groups, hyper, device = [], [], None
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            adapted = [p for p in params if self._adapted(group, p)]
            other = [p for p in params if not self._adapted(group, p)]
            params = adapted + other
            bufs = []
            for p in params:
                state = self.state[p]
                if state.get("momentum_buffer") is None:
                    state["momentum_buffer"] = torch.zeros_like(p)
                bufs.append(state["momentum_buffer"])
            if not self._marked:  # CUDA graphs update them in place, not through a copy
                for buf in bufs:
                    torch._dynamo.mark_static_address(buf)
            grads = [p.grad for p in params]
            consts = (len(adapted), float(group["eta"]), bool(group["clip_lr"]),
                      bool(group["nesterov"]))  # fmt: skip
            groups.append((params, grads, bufs, consts))
            hyper.append([group["lr"], group["weight_decay"], group["momentum"]])
            device = params[0].device
        self._marked = True
        if not groups:
            return
        values = torch.tensor(hyper, dtype=torch.float32)
        if device.type == "cuda":  # pinned: an asynchronous copy, no host wait
            values = values.pin_memory()
        values = values.to(device, non_blocking=True)
        if skip is None:
            skip = torch.zeros((), dtype=torch.bool, device=device)
        self._captured(groups, values, skip)  # type: ignore[misc]

    @staticmethod
    def _adapted(group: dict[str, Any], p: Tensor) -> bool:
        return not group["lars_exclude"] and not (group["exclude_bias_n_norm"] and p.ndim <= 1)

    def _update(self, group: dict[str, Any], params: list[Tensor], k: int) -> None:
        """Update ``params`` (one device and dtype, the ``k`` adapted ones first) in place."""
        grads: list[Tensor] = [p.grad for p in params]  # type: ignore[misc]
        lr, wd, momentum = group["lr"], group["weight_decay"], group["momentum"]
        # ``updates`` aliases the gradients (read-only) until an op makes new tensors.
        updates = torch._foreach_add(grads, params, alpha=wd) if wd != 0.0 else list(grads)
        if k:
            norms = torch.stack(torch._foreach_norm(params[:k] + grads[:k])).view(2, k)
            ratios = self._trust_ratios(norms, lr, wd, group["eta"], group["clip_lr"])
            if wd != 0.0:
                torch._foreach_mul_(updates[:k], list(ratios.unbind()))
            else:
                updates[:k] = torch._foreach_mul(updates[:k], list(ratios.unbind()))
        if momentum != 0.0:
            states = [self.state[p] for p in params]
            had = [i for i, s in enumerate(states) if s.get("momentum_buffer") is not None]
            if had:
                bufs = [states[i]["momentum_buffer"] for i in had]
                torch._foreach_mul_(bufs, momentum)
                torch._foreach_add_(bufs, [updates[i] for i in had])
            for state, update in zip(states, updates, strict=True):
                if state.get("momentum_buffer") is None:  # this parameter's first step
                    state["momentum_buffer"] = update.clone()
            bufs = [s["momentum_buffer"] for s in states]
            if group["nesterov"]:
                updates = torch._foreach_add(updates, bufs, alpha=momentum)
            else:
                updates = bufs
        torch._foreach_add_(params, updates, alpha=-lr)

    @staticmethod
    def _trust_ratios(norms: Tensor, lr: float, wd: float, eta: float, clip_lr: bool) -> Tensor:
        """Trust ratios ``(k,)`` from ``norms`` ``(2, k)`` (``||p||``, ``||g||``), on the device."""
        p_norm, g_norm = norms.unbind()
        ratio = eta * p_norm / (g_norm + wd * p_norm)
        ratio = torch.where((norms > 0).all(dim=0), ratio, 1.0)
        if clip_lr and lr > 0.0:
            ratio = torch.clamp(ratio / lr, max=1.0)
        return ratio


def captured_update(
    groups: list[tuple[list[Tensor], list[Tensor], list[Tensor], tuple[int, float, bool, bool]]],
    hyper: Tensor,
    skip: Tensor,
) -> None:
    """The eager update's formulas over every group (what [`LARS.capture`][] compiles):
    ``groups`` holds ``(params, grads, momentum buffers, (k, eta, clip_lr, nesterov))``
    with the ``k`` adapted parameters first, ``hyper`` ``[groups, 3]`` the learning rate,
    weight decay and momentum of each, and a ``True`` ``skip`` leaves everything as it was.
    """
    for i, (params, grads, bufs, (k, eta, clip_lr, nesterov)) in enumerate(groups):
        lr, wd, momentum = hyper[i].unbind()
        updates = list(torch._foreach_add(grads, torch._foreach_mul(params, wd)))
        if k:
            p_norm = torch.stack(torch._foreach_norm(params[:k]))
            g_norm = torch.stack(torch._foreach_norm(grads[:k]))
            ratio = eta * p_norm / (g_norm + wd * p_norm)
            ratio = torch.where((p_norm > 0) & (g_norm > 0), ratio, 1.0)
            if clip_lr:
                ratio = torch.where(lr > 0, torch.clamp(ratio / lr, max=1.0), ratio)
            updates[:k] = list(torch._foreach_mul(updates[:k], list(ratio.unbind())))
        new_bufs = torch._foreach_add(torch._foreach_mul(bufs, momentum), updates)
        steps = (
            torch._foreach_add(updates, torch._foreach_mul(new_bufs, momentum))
            if nesterov
            else new_bufs
        )
        for p, buf, new_buf, step in zip(params, bufs, new_bufs, steps, strict=True):
            buf.copy_(torch.where(skip, buf, new_buf))
            p.copy_(torch.where(skip, p, p - lr * step))
