"""LARS: SGD with momentum and layer-wise adaptive rate scaling.

Reference: You, Gitman & Ginsburg, "Large Batch Training of Convolutional Networks"
(2017), as used for SimCLR (Chen et al., 2020) and solo-learn. Each parameter tensor
("layer") gets its own trust ratio ``eta * ||p|| / (||g|| + wd * ||p||)`` that rescales
its (weight-decayed) gradient before the momentum update, so the step size is relative
to the weight norm rather than to the raw gradient scale of that layer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import Tensor
from torch.optim import Optimizer

from ncl_lightning.runtime.errors import ConfigError


class LARS(Optimizer):
    """SGD + momentum with layer-wise adaptive rate scaling (You et al., 2017).

    For every parameter ``p`` with gradient ``g`` in a group that is not excluded:

    * ``ratio = eta * ||p|| / (||g|| + weight_decay * ||p||)`` if both norms are > 0,
      else ``1``; with ``clip_lr`` the ratio becomes ``min(ratio / lr, 1)`` so the
      adaptive rate never exceeds the global learning rate (SimCLR / solo-learn).
    * ``d = (g + weight_decay * p) * ratio``
    * ``buf = momentum * buf + d``; ``d = d + momentum * buf`` (Nesterov) or ``buf``
    * ``p = p - lr * d``

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
        if not lr > 0.0:
            raise ConfigError(f"LARS lr must be > 0, got {lr}")
        if not 0.0 <= momentum < 1.0:
            raise ConfigError(f"LARS momentum must be in [0, 1), got {momentum}")
        if not weight_decay >= 0.0:
            raise ConfigError(f"LARS weight_decay must be >= 0, got {weight_decay}")
        if not eta > 0.0:
            raise ConfigError(f"LARS eta must be > 0, got {eta}")
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

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        """Perform one optimisation step.

        Args:
            closure: Optional callable that re-evaluates the model and returns the loss.

        Returns:
            The loss returned by ``closure``, if given.
        """
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()

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
                    update.mul_(self._trust_ratio(p, grad, lr, wd, group["eta"], group["clip_lr"]))

                if momentum != 0.0:
                    state = self.state[p]
                    buf = state.get("momentum_buffer")
                    if buf is None:
                        buf = state["momentum_buffer"] = update.clone()
                    else:
                        buf.mul_(momentum).add_(update)
                    update = update.add(buf, alpha=momentum) if group["nesterov"] else buf

                p.add_(update, alpha=-lr)
        return loss

    @staticmethod
    def _trust_ratio(
        p: Tensor, grad: Tensor, lr: float, wd: float, eta: float, clip_lr: bool
    ) -> Tensor:
        """Layer-wise rate as a 0-d tensor (no host sync: everything stays on device)."""
        p_norm = torch.linalg.vector_norm(p)
        g_norm = torch.linalg.vector_norm(grad)
        ratio = eta * p_norm / (g_norm + wd * p_norm)
        ratio = torch.where((p_norm > 0) & (g_norm > 0), ratio, torch.ones_like(ratio))
        if clip_lr and lr > 0.0:
            ratio = torch.clamp(ratio / lr, max=1.0)
        return ratio
