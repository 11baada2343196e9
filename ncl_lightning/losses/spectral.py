"""Spectral contrastive loss (HaoChen et al., "Provable Guarantees for Self-Supervised Deep
Learning with Spectral Contrastive Loss", NeurIPS 2021).

NCL's analysis (Wang et al., ICLR 2024, Sec. 4, Thm. 2) is stated for this loss: with
non-negative features it is exactly a symmetric non-negative matrix factorisation of the
augmentation co-occurrence matrix.

What the features are before the loss compares them is a choice (``normalize``):

* ``"ball"``: rows longer than ``√μ`` are scaled back to length ``√μ``, shorter rows are
  used as they are, and the loss is divided by ``μ``: HaoChen et al.'s release
  (``jhaochenz96/spectral_contrastive_learning``, ``models/spectral.py``, function ``D``;
  its CIFAR-10 config ``spectral_resnet_mlp1000_norelu_cifar10_lr003_mu1.yaml``
  sets ``μ = 1``). Inside the ball the loss sees the raw features of Eq. (2).
* ``"sphere"``: every row scaled to length ``√μ`` (unit rows at ``μ = 1``), loss divided
  by ``μ``; at ``μ = 1`` the loss of this package before the ``"ball"`` option, and still
  the default of the function, the module and the registered name ``spectral``.
* ``"none"``: the raw features, the objective of Eq. (2) and Thm. 2 as written (``μ`` must
  stay 1).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.foundation.registry import Registry
from ncl_lightning.foundation.validation import check_positive
from ncl_lightning.losses.pairs import normalize_rows, view_pairs

SPECTRAL_NORMALIZATIONS: Registry[Tensor] = Registry("spectral normalisation")
"""``(z [n, d], mu) -> [n, d]``: the rows the spectral loss compares, by the name a loss's
``normalize`` argument holds (``"ball"``, ``"sphere"``, ``"none"``)."""


@SPECTRAL_NORMALIZATIONS.register("ball")
def project_to_ball(z: Tensor, mu: float = 1.0) -> Tensor:
    """Rows longer than ``√μ`` scaled to length ``√μ``; shorter rows unchanged.

    HaoChen et al.'s release (``models/spectral.py``) keeps a row whose norm is below
    ``√μ`` and replaces the others by ``√μ z / ‖z‖``. Written as ``z · √μ / max(‖z‖, √μ)``
    it has no division by a small norm, so a zero row gets a finite gradient.

    Args:
        z: Features ``[n, d]``.
        mu: ``μ > 0``: the squared radius of the ball.

    Returns:
        ``[n, d]``, every row of norm ``<= √μ``.
    """
    radius = math.sqrt(mu)
    norm = torch.linalg.vector_norm(z, dim=1, keepdim=True)
    return z * (radius / norm.clamp_min(radius))


@SPECTRAL_NORMALIZATIONS.register("sphere")
def project_to_sphere(z: Tensor, mu: float = 1.0) -> Tensor:
    """Every row scaled to length ``√μ`` (a zero row stays zero, with no gradient).

    Args:
        z: Features ``[n, d]``.
        mu: ``μ > 0``: the squared radius of the sphere.

    Returns:
        ``[n, d]``: ``√μ z / ‖z‖`` row-wise.
    """
    return math.sqrt(mu) * normalize_rows(z)


@SPECTRAL_NORMALIZATIONS.register("none")
def raw_rows(z: Tensor, mu: float = 1.0) -> Tensor:
    """The features as they are (``mu`` is not used).

    Args:
        z: Features ``[n, d]``.
        mu: Unused; ``check_spectral`` keeps it at 1 for this choice.

    Returns:
        ``z`` itself.
    """
    del mu
    return z


def check_spectral(normalize: str, mu: float) -> None:
    """Check the spectral loss's ``normalize`` name and ``μ``.

    Raises:
        ConfigError: ``normalize`` is no registered name (the message lists them), ``mu``
            is not a finite number ``> 0``, or ``mu`` is not 1 with ``normalize: none``
            (raw features have no radius for ``μ`` to set).
    """
    SPECTRAL_NORMALIZATIONS.get(normalize, config_key="normalize")
    check_positive("mu", mu)
    if normalize.lower() == "none" and mu != 1:
        raise ConfigError(
            f"mu={mu!r} does nothing with normalize: none (raw features have no radius); "
            "set mu: 1.0, or normalize: ball as HaoChen et al.'s release",
            key="mu",
        )


def spectral_contrastive(
    z1: Tensor,
    z2: Tensor,
    gather_distributed: bool = True,
    normalize: str = "sphere",
    mu: float = 1.0,
) -> Tensor:
    """``(-2 E[fᵀf⁺] + E[(fᵀf')²]) / μ`` over two views, negatives from every rank.

    ``f`` are the rows ``z`` after ``normalize`` (module docstring). For each of the ``2n``
    local queries, the positive term is its inner product with the other view of the same
    image, and the negative term is the mean squared inner product with every other feature
    of the global batch (``2N - 2`` of them). HaoChen et al.'s release averages
    ``(f1_iᵀf2_j)²`` over the ``n(n - 1)`` cross-view pairs ``i ≠ j`` only: another
    estimate of the same expectation (Eq. 2 of the NCL paper draws ``x`` and ``x'``
    independently), which uses every pair of independent features of the batch here.

    Args:
        z1: First view's features ``[n, d]``.
        z2: Second view's features ``[n, d]``.
        gather_distributed: Use the features of every rank (differentiably) under DDP.
        normalize: ``"ball"`` (HaoChen et al.'s release), ``"sphere"`` or ``"none"``
            ([`SPECTRAL_NORMALIZATIONS`][ncl_lightning.losses.SPECTRAL_NORMALIZATIONS]).
        mu: ``μ > 0``: squared radius of the ball or sphere; the loss is divided by it
            (1 with ``"none"``; ``check_spectral``).

    Returns:
        Scalar loss, averaged over local queries.

    Raises:
        ConfigError: ``normalize`` is no registered name.
    """
    rescale = SPECTRAL_NORMALIZATIONS.get(normalize, config_key="normalize")
    pairs = view_pairs(rescale(z1, mu), rescale(z2, mu), gather_distributed)
    sim = pairs.similarities()  # [2n, 2N]
    positive = sim.gather(1, pairs.positive_index[:, None]).squeeze(1)
    is_neg = ~(pairs.self_mask() | pairs.positive_mask())
    negative = (sim.pow(2) * is_neg).sum(dim=1) / is_neg.sum(dim=1)
    return (-2.0 * positive + negative).mean() / mu


class SpectralContrastiveLoss(nn.Module):
    """Module wrapper of [`spectral_contrastive`][] (it has no temperature).

    The NCL paper's App. D.1 configs (``configs/cifar10_spectral_{cl,ncl}.yaml``) set
    ``normalize: ball`` and ``mu: 1.0``, HaoChen et al.'s release; the default ``"sphere"``
    keeps the loss of the registered name ``spectral``.

    Args:
        gather_distributed: Gather the other ranks' features under DDP.
        normalize: ``"ball"``, ``"sphere"`` or ``"none"``
            ([`SPECTRAL_NORMALIZATIONS`][ncl_lightning.losses.SPECTRAL_NORMALIZATIONS]).
        mu: ``μ > 0``: squared radius of the ball or sphere (1 with ``"none"``).

    Raises:
        ConfigError: From ``check_spectral``.
    """

    def __init__(
        self, gather_distributed: bool = True, normalize: str = "sphere", mu: float = 1.0
    ) -> None:
        super().__init__()
        check_spectral(normalize, mu)
        self.gather_distributed = gather_distributed
        self.normalize = normalize
        self.mu = mu

    def forward(self, z1: Tensor, z2: Tensor) -> Tensor:
        """``[n, d], [n, d] -> []``."""
        return spectral_contrastive(z1, z2, self.gather_distributed, self.normalize, self.mu)
