"""Supervised contrastive loss (Khosla et al., "Supervised Contrastive Learning", NeurIPS 2020).

The ``L_out`` form of the paper (its Eq. 2): every other sample of the batch with the
anchor's label is a positive, and the log-likelihoods of the positives are averaged
outside the log. With all labels distinct it is exactly InfoNCE / NT-Xent
([`info_nce`][ncl_lightning.losses.info_nce.info_nce]).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ncl_lightning.losses.info_nce import check_temperature
from ncl_lightning.losses.pairs import normalize_rows, view_pairs


def supcon(
    z1: Tensor,
    z2: Tensor,
    labels: Tensor,
    temperature: float = 0.2,
    gather_distributed: bool = True,
) -> Tensor:
    """SupCon ``L_out`` over two views, with the candidates of every rank.

    Each of the ``2n`` local features is an anchor ``a``; its candidates are the other
    ``2N - 1`` features of the global batch (``N = n * world_size``) and its positives
    ``P(a)`` are the candidates with the same label (the other view of the same image is
    always one, so ``|P(a)| >= 1``). Features are L2-normalised here::

        L = mean_a  -1/|P(a)| Σ_{p∈P(a)} log( exp(ẑ_a·ẑ_p/τ) / Σ_{k≠a} exp(ẑ_a·ẑ_k/τ) )

    Under DDP every rank averages over its own anchors; the equal-size rank means averaged
    by DDP equal the single-process loss on the concatenated batch.

    Args:
        z1: First view's features ``[n, d]``.
        z2: Second view's features ``[n, d]``.
        labels: Class labels ``[n]`` (integer) of the ``n`` images, shared by both views.
        temperature: Softmax temperature ``τ > 0``.
        gather_distributed: Take candidates (features differentiably, labels without
            gradient) from every rank under DDP.

    Returns:
        Scalar: the mean over local anchors of the per-anchor loss above.
    """
    pairs = view_pairs(normalize_rows(z1), normalize_rows(z2), gather_distributed)
    is_self = pairs.self_mask()  # [2n, 2N]
    positive = pairs.same_label(labels) & ~is_self
    logits = (pairs.similarities() / temperature).masked_fill(is_self, float("-inf"))
    log_prob = logits.log_softmax(dim=1)
    pos_log_prob = torch.where(positive, log_prob, torch.zeros_like(log_prob)).sum(dim=1)
    return -(pos_log_prob / positive.sum(dim=1)).mean()


class SupConLoss(nn.Module):
    """Module wrapper of [`supcon`][].

    Args:
        temperature: Softmax temperature, > 0 (NCL CIFAR setting: 0.2; SupCon paper: 0.1).
        gather_distributed: Gather candidates and their labels from every rank under DDP.
    """

    def __init__(self, temperature: float = 0.2, gather_distributed: bool = True) -> None:
        super().__init__()
        check_temperature(temperature)
        self.temperature = temperature
        self.gather_distributed = gather_distributed

    def forward(self, z1: Tensor, z2: Tensor, labels: Tensor) -> Tensor:
        """``[n, d], [n, d], [n] -> []``."""
        return supcon(z1, z2, labels, self.temperature, self.gather_distributed)
