"""InfoNCE with an L1 sparsity penalty: the "CL + sparsity regularisation" baseline of the
NCL paper (Wang et al., ICLR 2024, Table 5, App. D.2).

The baseline asks whether an explicit sparsity penalty on ordinary (signed) CL features
gives what NCL's non-negativity gives. The penalty is on the L2-normalised features the
InfoNCE loss compares: InfoNCE is invariant to the scale of ``z``, so a penalty on raw
``z`` would be met by shrinking every feature towards zero without making any sparser.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ncl_lightning.foundation.validation import check_at_least
from ncl_lightning.losses.info_nce import check_temperature, info_nce
from ncl_lightning.losses.pairs import normalize_rows

L1_WEIGHT = 0.1
"""Default λ of [`info_nce_l1`][ncl_lightning.losses.info_nce_l1]. Neither the NCL
paper's text we could read nor its release (``PKU-ML/non_neg``, which has no L1 code) gives
the coefficient; 0.1 is our choice: at a dense start (``‖ẑ‖₁ ≈ √(2d/π)``, about 12.8 for
d = 256) the penalty is about 1.3 against an InfoNCE loss of about 6, large enough to
sparsify without swamping the contrastive term."""


def l1_penalty(z1: Tensor, z2: Tensor) -> Tensor:
    """Mean L1 norm of the L2-normalised features of both views: ``mean_i ‖ẑ_i‖₁``.

    Args:
        z1: First view's features ``[n, d]``.
        z2: Second view's features ``[n, d]``.

    Returns:
        Scalar in ``[1, √d]`` (1 for one-hot rows, ``√d`` for rows of equal magnitude);
        rows of zeros count 0.
    """
    rows = torch.cat([normalize_rows(z1), normalize_rows(z2)])
    return rows.abs().sum(dim=1).mean()


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
