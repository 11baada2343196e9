"""InfoNCE / NT-Xent (Oord et al., 2018; Chen et al., "SimCLR", ICML 2020)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ncl_lightning.losses.normalize import normalize_rows
from ncl_lightning.nn.gather import gather_with_grad, rank


def _views_and_keys(z1: Tensor, z2: Tensor, gather_distributed: bool) -> tuple[Tensor, Tensor, int]:
    """Return local queries ``[2n, d]``, keys from every rank ``[2N, d]`` and this rank's offset."""
    if z1.shape != z2.shape or z1.dim() != 2:
        raise ValueError(
            f"expected two [n, d] views of equal shape, got {tuple(z1.shape)} and {tuple(z2.shape)}"
        )
    queries = torch.cat([z1, z2])
    if gather_distributed:
        k1, k2 = gather_with_grad(z1), gather_with_grad(z2)
        offset = rank() * z1.shape[0]
    else:
        k1, k2, offset = z1, z2, 0
    return queries, torch.cat([k1, k2]), offset


def pair_indices(n: int, total: int, offset: int, device: torch.device) -> tuple[Tensor, Tensor]:
    """Indices into the ``[2N]`` keys of each local query's own entry and its positive.

    Query ``i < n`` is view 1 of global sample ``offset + i``; query ``n + i`` is its view 2.
    Returns ``(self_idx, pos_idx)``, each ``[2n]``.
    """
    idx = torch.arange(n, device=device) + offset
    self_idx = torch.cat([idx, idx + total])
    pos_idx = torch.cat([idx + total, idx])
    return self_idx, pos_idx


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
    z1, z2 = normalize_rows(z1), normalize_rows(z2)
    queries, keys, offset = _views_and_keys(z1, z2, gather_distributed)
    n, total = z1.shape[0], keys.shape[0] // 2
    self_idx, pos_idx = pair_indices(n, total, offset, z1.device)
    logits = queries @ keys.T / temperature
    is_self = torch.zeros_like(logits, dtype=torch.bool)
    is_self[torch.arange(2 * n, device=z1.device), self_idx] = True
    logits = logits.masked_fill(is_self, float("-inf"))
    return F.cross_entropy(logits, pos_idx)


class InfoNCELoss(nn.Module):
    """Module wrapper of :func:`info_nce`.

    Args:
        temperature: Softmax temperature, > 0 (SimCLR/NCL CIFAR setting: 0.2).
        gather_distributed: Gather negatives from every rank under DDP.
    """

    def __init__(self, temperature: float = 0.2, gather_distributed: bool = True) -> None:
        super().__init__()
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        self.temperature = temperature
        self.gather_distributed = gather_distributed

    def forward(self, z1: Tensor, z2: Tensor) -> Tensor:
        """``[n, d], [n, d] -> []``."""
        return info_nce(z1, z2, self.temperature, self.gather_distributed)
