"""InfoNCE / NT-Xent (Oord et al., 2018; Chen et al., "SimCLR", ICML 2020)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.foundation.validation import check_positive
from ncl_lightning.losses.pairs import normalize_rows, view_pairs

MIN_TEMPERATURE = 1 / math.sqrt(torch.finfo(torch.float32).max)
"""About 5.4e-20: the loss and its gradients scale as 1/temperature, and below this the
squared norm of a gradient (what the guard and gradient clipping compute) overflows
float32 on the first step."""


def check_temperature(temperature: float) -> None:
    """The one check of a contrastive loss's softmax temperature (InfoNCE, its L1 variant,
    SupCon): a finite number whose scale float32 can hold.

    Raises:
        ConfigError: ``temperature`` not ``> 0``, not finite, or below
            ``MIN_TEMPERATURE``, naming the key ``temperature``.
    """
    check_positive("temperature", temperature)
    if temperature < MIN_TEMPERATURE:
        raise ConfigError(
            f"temperature={temperature:g} is too small: the loss and its gradients scale as "
            f"1/temperature = {1 / temperature:.3g}, and below {MIN_TEMPERATURE:.2g} their "
            "squared norm overflows float32 at the first step; the papers train at 0.05 to 0.5",
            key="temperature",
        )


def info_nce(
    z1: Tensor, z2: Tensor, temperature: float = 0.2, gather_distributed: bool = True
) -> Tensor:
    """NT-Xent loss over two views, with the negatives of every rank.

    Each of the ``2n`` local features is a query; its positive is the other view of the same
    image and its negatives are the other ``2N - 2`` features of the global batch
    (``N = n * world_size``). Features are L2-normalised here, so callers pass raw (or
    non-negative, for NCL) projector outputs.

    Args:
        z1: First view's features ``[n, d]``.
        z2: Second view's features ``[n, d]``.
        temperature: Softmax temperature ``τ > 0``.
        gather_distributed: Use the negatives of every rank (differentiably) under DDP.

    Returns:
        Scalar: the mean over local queries of ``-log softmax(ẑ_q·ẑ_k/τ)[positive]``.
    """
    pairs = view_pairs(normalize_rows(z1), normalize_rows(z2), gather_distributed)
    logits = (pairs.similarities() / temperature).masked_fill(pairs.self_mask(), float("-inf"))
    return F.cross_entropy(logits, pairs.positive_index)


class InfoNCELoss(nn.Module):
    """Module wrapper of [`info_nce`][].

    Args:
        temperature: Softmax temperature, > 0 (SimCLR/NCL CIFAR setting: 0.2).
        gather_distributed: Gather negatives from every rank under DDP.
    """

    def __init__(self, temperature: float = 0.2, gather_distributed: bool = True) -> None:
        super().__init__()
        check_temperature(temperature)
        self.temperature = temperature
        self.gather_distributed = gather_distributed

    def forward(self, z1: Tensor, z2: Tensor) -> Tensor:
        """``[n, d], [n, d] -> []``."""
        return info_nce(z1, z2, self.temperature, self.gather_distributed)
