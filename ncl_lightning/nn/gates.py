"""Bernoulli gates for BayesNCL ("Bayesian Gated Non-Negative Contrastive Learning",
ICML 2026): per-sample, per-dimension masks ``m`` that multiply the NCL features.

Each gate maps open probabilities ``α = σ(g / T) ∈ (0, 1)`` ``[B, d]`` (``g`` the gating
head's logits, ``T`` its sigmoid temperature) to a mask ``[B, d]``: in training by its own
rule (``ste``, the paper's; ``gumbel``, the release's ablation; ``logistic``; ``soft``), at
inference by the deterministic hard mask ``1[α > threshold]``.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ncl_lightning.foundation.registry import Registry
from ncl_lightning.foundation.validation import check_positive, check_range

GATES: Registry[nn.Module] = Registry("gate type")
"""BayesNCL gates by name (``model.init_args.gate``): ``"ste"``, ``"gumbel"``,
``"logistic"``, ``"soft"``."""


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


def bernoulli_kl(alpha: Tensor, prior: float, eps: float = 0.01) -> Tensor:
    """``KL(Bern(α) || Bern(ρ))`` elementwise, ``α`` and ``ρ`` clamped to ``[eps, 1 − eps]``.

    The default ``eps = 0.01`` is the BayesNCL release's (``compute_bernoulli_kl_divergence``
    in ``solo/methods/bayesncl_helper_functions.py``): an ``α`` outside ``[0.01, 0.99]``
    gets no KL gradient.

    Args:
        alpha: Open probabilities ``[B, d]`` (any shape).
        prior: Prior open probability ``ρ``.
        eps: Clamp margin, in ``[0, 0.5)``.

    Returns:
        The KL of every entry, ``alpha``'s shape.
    """
    a = alpha.clamp(eps, 1 - eps)
    rho = min(max(prior, eps), 1 - eps)
    return a * torch.log(a / rho) + (1 - a) * torch.log((1 - a) / (1 - rho))


class Gate(nn.Module):
    """Base gate: hard threshold at inference; subclasses define the training mask.

    Args:
        threshold: Open when ``α > threshold`` (paper: 0.5).
        temperature: The sigmoid temperature ``T`` of ``α = σ(g / T)`` (BayesNCL passes its
            ``gate_temperature``), for gates that work on the logits ``g = T · logit α``.
    """

    def __init__(self, threshold: float = 0.5, temperature: float = 1.0) -> None:
        super().__init__()
        check_range("threshold", threshold, 0, 1, closed="()")
        check_positive("gate_temperature", temperature)
        self.threshold = threshold
        self.temperature = temperature

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
    """Hard ``1[α > t]`` forward, ``∂m/∂α = 1`` backward (straight-through estimator)."""

    def train_mask(self, alpha: Tensor) -> Tensor:
        return straight_through(self.hard(alpha), alpha)


def _logit(alpha: Tensor) -> Tensor:
    """``log(α / (1 − α))``, ``α`` kept 1e-6 away from 0 and 1 (where the sigmoid's gradient
    is ~0 anyway)."""
    a = alpha.clamp(1e-6, 1 - 1e-6)
    return torch.log(a) - torch.log1p(-a)


def _uniform(like: Tensor) -> Tensor:
    """``U(0, 1)`` draws of ``like``'s shape, away from 0 and 1 (global generator)."""
    return torch.rand_like(like).clamp(1e-6, 1 - 1e-6)


@GATES.register("gumbel")
class GumbelGate(Gate):
    """The BayesNCL release's Gumbel gate (``gumbel_sigmoid`` in
    ``solo/methods/bayesncl_helper_functions.py``): ``s = σ((g + G) / T)``,
    ``G ~ Gumbel(0, 1)``, hard ``1[s > threshold]`` forward, ``∂m/∂s = 1`` backward.

    ``g = T · logit α`` are the gating head's logits. It is not a Bernoulli(α) sample:
    ``G`` has mean ≈ 0.577, so a gate opens with probability
    ``1 − exp(−exp(T·(logit α − logit threshold)))`` (``1 − exp(−α/(1−α))`` at ``T = 1``,
    threshold 0.5): more often than ``α`` (0.63 at ``α = 0.5``). Reproducible under
    ``torch.manual_seed`` (it draws from the global generator). The release draws
    ``G = −log(−log(u + 1e-4) + 1e-4)``; here ``u`` is kept in ``[1e-6, 1 − 1e-6]``.
    """

    def train_mask(self, alpha: Tensor) -> Tensor:
        gumbel = -torch.log(-torch.log(_uniform(alpha)))
        relaxed = torch.sigmoid(_logit(alpha) + gumbel / self.temperature)
        return straight_through((relaxed > self.threshold).to(alpha.dtype), relaxed)


@GATES.register("logistic")
class LogisticGate(Gate):
    """Binary Concrete / Gumbel-sigmoid sample (Maddison et al., 2017; Jang et al., 2017)
    ``s = σ((logit α + log u − log(1 − u)) / τ)``, hard ``1[s > 0.5]`` forward (an exact
    Bernoulli(α) sample), straight-through to ``s``.

    Reproducible under ``torch.manual_seed`` (it draws from the global generator).

    Args:
        threshold: Threshold of inference's hard mask.
        temperature: Sigmoid temperature of ``α`` (unused: the noise is on ``logit α``).
        tau: Temperature of the relaxed sample.
    """

    def __init__(self, threshold: float = 0.5, temperature: float = 1.0, tau: float = 1.0) -> None:
        super().__init__(threshold, temperature)
        check_positive("tau", tau)
        self.tau = tau

    def train_mask(self, alpha: Tensor) -> Tensor:
        u = _uniform(alpha)
        relaxed = torch.sigmoid((_logit(alpha) + torch.log(u) - torch.log1p(-u)) / self.tau)
        return straight_through((relaxed > 0.5).to(alpha.dtype), relaxed)


@GATES.register("soft")
class SoftGate(Gate):
    """``m = α`` in training (an ablation); hard at inference like every gate."""

    def train_mask(self, alpha: Tensor) -> Tensor:
        return alpha
