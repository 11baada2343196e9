"""Bernoulli gates for BayesNCL ("Bayesian Gated Non-Negative Contrastive Learning",
ICML 2026): per-sample, per-dimension masks ``m`` that multiply the NCL features.

Each gate maps open probabilities ``α ∈ (0, 1)`` ``[B, d]`` to a mask ``[B, d]``:

* ``ste``: forward the hard mask ``1[α > threshold]``, backward through ``α``
  (straight-through estimator, the paper's gate);
* ``gumbel``: a Gumbel-sigmoid (binary Concrete) sample, hard in the forward pass, with the
  straight-through gradient of the relaxed sample;
* ``soft``: the probabilities themselves (ablation).

At inference every gate is the deterministic hard mask ``1[α > threshold]``.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ncl_lightning.registry import Registry
from ncl_lightning.runtime.errors import ConfigError

GATES: Registry[nn.Module] = Registry("gate type")
"""BayesNCL gates by name (``model.init_args.gate``): ``"ste"``, ``"gumbel"``, ``"soft"``."""


class _StraightThrough(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hard: Tensor, soft: Tensor) -> Tensor:  # type: ignore[override]
        return hard.clone()

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[None, Tensor]:  # type: ignore[override]
        return None, grad


def straight_through(hard: Tensor, soft: Tensor) -> Tensor:
    """Exactly ``hard`` in the forward pass (not ``hard + soft - soft``, which rounds), the
    gradient of ``soft`` in the backward pass."""
    return _StraightThrough.apply(hard.to(soft.dtype), soft)


def bernoulli_kl(alpha: Tensor, prior: float, eps: float = 1e-6) -> Tensor:
    """``KL(Bern(α) || Bern(ρ))`` elementwise, ``α`` clamped to ``[eps, 1 - eps]``."""
    a = alpha.clamp(eps, 1 - eps)
    return a * torch.log(a / prior) + (1 - a) * torch.log((1 - a) / (1 - prior))


class Gate(nn.Module):
    """Base gate: hard threshold at inference; subclasses define the training mask.

    Args:
        threshold: Open when ``α > threshold`` (paper: 0.5).
    """

    def __init__(self, threshold: float = 0.5) -> None:
        super().__init__()
        if not 0.0 < threshold < 1.0:
            raise ConfigError(f"threshold must be in (0, 1), got {threshold}")
        self.threshold = threshold

    def hard(self, alpha: Tensor) -> Tensor:
        """Deterministic mask ``1[α > threshold]`` ``[B, d]``."""
        return (alpha > self.threshold).to(alpha.dtype)

    def train_mask(self, alpha: Tensor) -> Tensor:
        """Mask used in training (differentiable with respect to ``α``)."""
        raise NotImplementedError

    def forward(self, alpha: Tensor) -> Tensor:
        """``α [B, d] -> m [B, d]``: the training mask in train mode, the hard one otherwise."""
        return self.train_mask(alpha) if self.training else self.hard(alpha)


@GATES.register("ste")
class STEGate(Gate):
    """Hard ``1[α > t]`` forward, ``∂m/∂α = 1`` backward."""

    def train_mask(self, alpha: Tensor) -> Tensor:
        return straight_through(self.hard(alpha), alpha)


@GATES.register("gumbel")
class GumbelGate(Gate):
    """Gumbel-sigmoid sample ``σ((logit α + log u − log(1 − u)) / τ_g)``, hard forward.

    Reproducible under ``torch.manual_seed`` (it draws from the global generator).

    Args:
        threshold: Threshold of the hard forward mask and of inference.
        tau: Temperature of the relaxed sample.
    """

    def __init__(self, threshold: float = 0.5, tau: float = 1.0) -> None:
        super().__init__(threshold)
        if not tau > 0:
            raise ConfigError(f"gumbel tau must be > 0, got {tau}")
        self.tau = tau

    def train_mask(self, alpha: Tensor) -> Tensor:
        a = alpha.clamp(1e-6, 1 - 1e-6)
        u = torch.rand_like(a).clamp(1e-6, 1 - 1e-6)
        relaxed = torch.sigmoid((torch.log(a / (1 - a)) + torch.log(u / (1 - u))) / self.tau)
        return straight_through((relaxed > 0.5).to(a.dtype), relaxed)


@GATES.register("soft")
class SoftGate(Gate):
    """``m = α`` in training (an ablation); hard at inference like every gate."""

    def train_mask(self, alpha: Tensor) -> Tensor:
        return alpha
