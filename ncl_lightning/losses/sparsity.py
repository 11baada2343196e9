"""Contrastive losses with an L1 sparsity penalty on their features: the baseline of the NCL
paper's Table 5 (Wang et al., ICLR 2024, App. D.2), and an InfoNCE variant of ours.

**SCL + reg** ([`spectral_l1`][ncl_lightning.losses.spectral_l1]): App. D.2 adds the penalty
to the *spectral* contrastive loss in the App. D.1 setting and asks whether it gives what
NCL's non-negativity gives (Table 5: SCL 88.0 / 85.4 / 0.00, SCL + reg 87.2 / 84.1 / 0.03,
NCL 88.6 / 86.2 / 69.65; encoder probe %, projector probe %, sparsity %). The extracted text
keeps neither the objective (Eq. 14) nor λ, and the NCL release has no L1 code: the
penalty here is λ times the mean L1 norm of the rows the spectral loss compares (its
``normalize``), the raw features inside HaoChen et al.'s ball, and λ is ours.

**InfoNCE + L1** ([`info_nce_l1`][ncl_lightning.losses.info_nce_l1]): not a paper setting,
our InfoNCE counterpart of the baseline (``configs/cifar10_cl_l1.yaml``). The penalty is on
the L2-normalised features InfoNCE compares: InfoNCE is invariant to the scale of ``z``, so
a penalty on raw ``z`` would be met by shrinking every feature towards zero without making
any sparser.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ncl_lightning.foundation.validation import check_at_least
from ncl_lightning.losses.info_nce import check_temperature, info_nce
from ncl_lightning.losses.pairs import normalize_rows
from ncl_lightning.losses.spectral import (
    SPECTRAL_NORMALIZATIONS,
    check_spectral,
    spectral_contrastive,
)

L1_WEIGHT = 0.1
"""Default λ of [`info_nce_l1`][ncl_lightning.losses.info_nce_l1]. Neither the NCL
paper's text we could read nor its release (``PKU-ML/non_neg``, which has no L1 code) gives
the coefficient; 0.1 is our choice: at a dense start (``‖ẑ‖₁ ≈ √(2d/π)``, about 12.8 for
d = 256) the penalty is about 1.3 against an InfoNCE loss of about 6, large enough to
sparsify without swamping the contrastive term."""

SPECTRAL_L1_WEIGHT = 0.01
"""Default λ of [`spectral_l1`][ncl_lightning.losses.spectral_l1] ("SCL + reg"). The NCL
paper's λ (App. D.2, "a good tradeoff between accuracy and sparsity on CIFAR-10") did not
survive the text we could read, and its release has no L1 code; 0.01 is our choice. Rows on
the unit ball of a dense ``d = 1000`` projector output have ``‖f‖₁ ≈ √(2d/π) ≈ 25``, so the
penalty is about 0.25 and its gradient ``λ·sign(f)`` has norm ``λ√d ≈ 0.3``, beside a
spectral loss near -2 whose gradient has norm about 2: felt but not dominant, in line with
what the paper reports for its λ (0.8 points of encoder accuracy lost, features left dense
with 0.03 % zeros)."""


def feature_l1(f1: Tensor, f2: Tensor) -> Tensor:
    """Mean L1 norm of the rows of both views: ``mean_i ‖f_i‖₁``.

    Args:
        f1: First view's features ``[n, d]``, as the loss compares them.
        f2: Second view's features ``[n, d]``.

    Returns:
        Scalar ``>= 0``.
    """
    return torch.cat([f1, f2]).abs().sum(dim=1).mean()


def l1_penalty(z1: Tensor, z2: Tensor) -> Tensor:
    """Mean L1 norm of the L2-normalised features of both views: ``mean_i ‖ẑ_i‖₁``.

    Args:
        z1: First view's features ``[n, d]``.
        z2: Second view's features ``[n, d]``.

    Returns:
        Scalar in ``[1, √d]`` (1 for one-hot rows, ``√d`` for rows of equal magnitude);
        rows of zeros count 0.
    """
    return feature_l1(normalize_rows(z1), normalize_rows(z2))


def info_nce_l1(
    z1: Tensor,
    z2: Tensor,
    temperature: float = 0.2,
    l1_weight: float = L1_WEIGHT,
    gather_distributed: bool = True,
) -> Tensor:
    """``info_nce(z1, z2) + λ · mean_i ‖ẑ_i‖₁`` (NCL paper, Table 5: CL + L1 penalty).

    Args:
        z1: First view's features ``[n, d]``.
        z2: Second view's features ``[n, d]``.
        temperature: Softmax temperature ``τ > 0`` of
            [`info_nce`][ncl_lightning.losses.info_nce.info_nce].
        l1_weight: λ >= 0; 0 is plain InfoNCE.
        gather_distributed: Negatives from every rank under DDP (the penalty is local).

    Returns:
        Scalar loss.
    """
    check_at_least("l1_weight", l1_weight, 0)
    loss = info_nce(z1, z2, temperature, gather_distributed)
    if l1_weight == 0:
        return loss
    return loss + l1_weight * l1_penalty(z1, z2)


class InfoNCEL1Loss(nn.Module):
    """Module wrapper of [`info_nce_l1`][ncl_lightning.losses.info_nce_l1]; a
    method's ``loss`` (by ``class_path``, or the registered name ``info_nce_l1`` with
    the default λ).

    Args:
        temperature: Softmax temperature, > 0 (CIFAR setting: 0.2).
        l1_weight: Weight λ >= 0 of the L1 penalty.
        gather_distributed: Gather negatives from every rank under DDP.
    """

    def __init__(
        self,
        temperature: float = 0.2,
        l1_weight: float = L1_WEIGHT,
        gather_distributed: bool = True,
    ) -> None:
        super().__init__()
        check_temperature(temperature)
        check_at_least("l1_weight", l1_weight, 0)
        self.temperature = temperature
        self.l1_weight = l1_weight
        self.gather_distributed = gather_distributed

    def forward(self, z1: Tensor, z2: Tensor) -> Tensor:
        """``[n, d], [n, d] -> []``."""
        return info_nce_l1(z1, z2, self.temperature, self.l1_weight, self.gather_distributed)


def spectral_l1(
    z1: Tensor,
    z2: Tensor,
    l1_weight: float = SPECTRAL_L1_WEIGHT,
    gather_distributed: bool = True,
    normalize: str = "sphere",
    mu: float = 1.0,
) -> Tensor:
    """``spectral_contrastive(z1, z2) + λ · mean_i ‖f_i‖₁``: "SCL + reg" (NCL paper App. D.2,
    Table 5).

    ``f`` are the rows the spectral loss compares: ``z`` after ``normalize`` (see
    [`spectral_contrastive`][ncl_lightning.losses.spectral_contrastive]). With
    ``normalize: ball`` (HaoChen et al.'s release, the Table 5 config) a row inside the
    ball is penalised as it is, ``λ‖z‖₁`` as in Eq. (14)'s "regularization on the output
    features"; a longer row is penalised at the length the loss sees it. With ``"sphere"``
    the penalty is scale-free (``‖ẑ‖₁``), as [`l1_penalty`][ncl_lightning.losses.l1_penalty].

    Args:
        z1: First view's features ``[n, d]``.
        z2: Second view's features ``[n, d]``.
        l1_weight: λ >= 0; 0 is the spectral loss alone.
        gather_distributed: Negatives from every rank under DDP (the penalty is local).
        normalize: ``"ball"``, ``"sphere"`` or ``"none"``.
        mu: ``μ > 0`` of the spectral loss (1 with ``"none"``); it divides the spectral
            term only.

    Returns:
        Scalar loss.
    """
    check_at_least("l1_weight", l1_weight, 0)
    rescale = SPECTRAL_NORMALIZATIONS.get(normalize, config_key="normalize")
    f1, f2 = rescale(z1, mu), rescale(z2, mu)
    loss = spectral_contrastive(f1, f2, gather_distributed, normalize="none") / mu
    if l1_weight == 0:
        return loss
    return loss + l1_weight * feature_l1(f1, f2)


class SpectralL1Loss(nn.Module):
    """Module wrapper of [`spectral_l1`][ncl_lightning.losses.spectral_l1], "SCL + reg" of
    the NCL paper's Table 5; a method's ``loss`` by ``class_path``
    (``configs/cifar10_spectral_cl_l1.yaml`` sets ``normalize: ball``, ``mu: 1.0``).

    Args:
        l1_weight: Weight λ >= 0 of the L1 penalty (ours: the paper's is lost).
        normalize: ``"ball"``, ``"sphere"`` or ``"none"``, as
            [`SpectralContrastiveLoss`][ncl_lightning.losses.SpectralContrastiveLoss].
        mu: ``μ > 0`` of the spectral loss (1 with ``"none"``).
        gather_distributed: Gather negatives from every rank under DDP.

    Raises:
        ConfigError: ``l1_weight`` negative or not finite; the checks of
            ``ncl_lightning.losses.spectral.check_spectral``.
    """

    def __init__(
        self,
        l1_weight: float = SPECTRAL_L1_WEIGHT,
        normalize: str = "sphere",
        mu: float = 1.0,
        gather_distributed: bool = True,
    ) -> None:
        super().__init__()
        check_at_least("l1_weight", l1_weight, 0)
        check_spectral(normalize, mu)
        self.l1_weight = l1_weight
        self.normalize = normalize
        self.mu = mu
        self.gather_distributed = gather_distributed

    def forward(self, z1: Tensor, z2: Tensor) -> Tensor:
        """``[n, d], [n, d] -> []``."""
        return spectral_l1(z1, z2, self.l1_weight, self.gather_distributed, self.normalize, self.mu)
