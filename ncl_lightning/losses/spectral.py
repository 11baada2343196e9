"""Spectral contrastive loss (HaoChen et al., "Provable Guarantees for Self-Supervised Deep
Learning with Spectral Contrastive Loss", NeurIPS 2021).

NCL's analysis (Wang et al., ICLR 2024, Sec. 4) is stated for this loss: with non-negative
features it is exactly a symmetric non-negative matrix factorisation of the augmentation
co-occurrence matrix.
"""

from __future__ import annotations

from torch import Tensor, nn

from ncl_lightning.losses.pairs import normalize_rows, view_pairs


def spectral_contrastive(z1: Tensor, z2: Tensor, gather_distributed: bool = True) -> Tensor:
    """``-2 E[ẑᵀẑ⁺] + E[(ẑᵀẑ')²]`` over two views, negatives from every rank.

    Features are L2-normalised. For each of the ``2n`` local queries, the positive term is
    its similarity with the other view of the same image, and the negative term is the mean
    squared similarity with every other feature of the global batch (``2N - 2`` of them).

    Args:
        z1: First view's features ``[n, d]``.
        z2: Second view's features ``[n, d]``.
        gather_distributed: Use the features of every rank (differentiably) under DDP.

    Returns:
        Scalar loss, averaged over local queries.
    """
    pairs = view_pairs(normalize_rows(z1), normalize_rows(z2), gather_distributed)
    sim = pairs.similarities()  # [2n, 2N]
    positive = sim.gather(1, pairs.positive_index[:, None]).squeeze(1)
    is_neg = ~(pairs.self_mask() | pairs.positive_mask())
    negative = (sim.pow(2) * is_neg).sum(dim=1) / is_neg.sum(dim=1)
    return (-2.0 * positive + negative).mean()


class SpectralContrastiveLoss(nn.Module):
    """Module wrapper of [`spectral_contrastive`][] (it has no temperature).

    Args:
        gather_distributed: Gather the other ranks' features under DDP.
    """

    def __init__(self, gather_distributed: bool = True) -> None:
        super().__init__()
        self.gather_distributed = gather_distributed

    def forward(self, z1: Tensor, z2: Tensor) -> Tensor:
        """``[n, d], [n, d] -> []``."""
        return spectral_contrastive(z1, z2, self.gather_distributed)
