"""Non-negative maps ``σ+`` applied to the projector output by NCL.

NCL (Wang et al., "Non-negative Contrastive Learning", ICLR 2024, Sec. 3) reparameterises
the features as ``z+ = σ+(g(f(x)))``. ReLU is the paper's choice on ImageNet; on CIFAR the
released configs use ``rep_relu``: exactly ReLU in the forward pass, with the gradient of
GELU in the backward pass, so that dimensions that are negative on every sample still
receive gradient and do not die. New maps are added with ``NONNEG.register``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ncl_lightning.foundation.registry import Registry

NONNEG: Registry[nn.Module] = Registry("non-negative map")
"""Non-negative maps σ⁺ by name (``model.init_args.nonneg``).

``@NONNEG.register("name")`` on an ``nn.Module`` class adds one."""


def gelu_grad(x: Tensor) -> Tensor:
    """Derivative of the exact (erf) GELU: ``Φ(x) + x φ(x)``; same shape as ``x``."""
    cdf = 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0)))
    pdf = torch.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)
    return cdf + x * pdf


class _RepReLUFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor) -> Tensor:  # type: ignore[override]
        ctx.save_for_backward(x)
        return torch.relu(x)

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:  # type: ignore[override]
        (x,) = ctx.saved_tensors
        return grad * gelu_grad(x)


def rep_relu(x: Tensor) -> Tensor:
    """ReLU forward, GELU-gradient backward (NCL's "reparameterised ReLU")."""
    return _RepReLUFunction.apply(x)


@NONNEG.register("relu")
class ReLU(nn.ReLU):
    """``max(x, 0)``: sparse, exact zeros; the ImageNet setting of NCL."""


@NONNEG.register("rep_relu")
class RepReLU(nn.Module):
    """Forward exactly ``relu(x)``; backward ``grad * GELU'(x)`` (no dead dimensions)."""

    def forward(self, x: Tensor) -> Tensor:
        return rep_relu(x)


@NONNEG.register("softplus")
class Softplus(nn.Softplus):
    """``log(1 + e^x)``: strictly positive, so never exactly sparse."""


@NONNEG.register("sigmoid")
class Sigmoid(nn.Sigmoid):
    """``1 / (1 + e^-x)``: bounded positive features."""


@NONNEG.register("exp")
class Exp(nn.Module):
    """``e^x``: strictly positive, unbounded."""

    def forward(self, x: Tensor) -> Tensor:
        return torch.exp(x)
