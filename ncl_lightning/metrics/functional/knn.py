"""Weighted k-nearest-neighbour classification on a feature bank.

Reference: Wu, Xiong, Yu & Lin, "Unsupervised Feature Learning via Non-Parametric
Instance Discrimination" (CVPR 2018), Sec. 3.4: neighbours by cosine similarity, each of
the top-k votes for its class with weight ``exp(sim / temperature)``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.foundation.validation import (
    check_indices,
    check_int,
    check_positive,
    check_shape,
)


def check_knn_arguments(k: int, temperature: float, prefix: str = "") -> None:
    """One-line errors for the neighbour count (>= 1) and the vote temperature (> 0)."""
    check_int(f"{prefix}k", k)
    check_positive(f"{prefix}temperature", temperature)


def weighted_knn_predict(
    query: Tensor,
    bank: Tensor,
    bank_labels: Tensor,
    num_classes: int,
    k: int = 200,
    temperature: float = 0.07,
    chunk_size: int = 1024,
) -> Tensor:
    """Class scores of the cosine-similarity weighted kNN classifier (Wu et al., 2018).

    ``score[q, c] = sum_{i in topk(q)} [y_i = c] * exp(cos(query_q, bank_i) / temperature)``.
    Queries are processed ``chunk_size`` at a time so memory is ``O(chunk_size * N)``.

    Args:
        query: Query features ``[Q, D]`` (need not be normalised).
        bank: Bank features ``[N, D]`` (need not be normalised).
        bank_labels: Integer labels ``[N]`` in ``[0, num_classes)``.
        num_classes: Number of classes ``C``.
        k: Number of neighbours; clipped to ``N``.
        temperature: Softmax-like temperature of the vote weights (> 0).
        chunk_size: Queries per chunk (>= 1).

    Returns:
        Scores ``[Q, C]`` (float32 or the inputs' wider float dtype); ``argmax(-1)`` is
        the prediction.
    """
    if query.ndim != 2 or bank.ndim != 2 or query.shape[1] != bank.shape[1]:
        raise ConfigError(
            f"query [Q, D] and bank [N, D] must share D, got {tuple(query.shape)} "
            f"and {tuple(bank.shape)}",
            key="query",
        )
    check_shape("bank_labels", bank_labels, (bank.shape[0],))
    if bank.shape[0] == 0:
        raise ConfigError("bank must hold at least one sample", key="bank")
    check_int("num_classes", num_classes)
    check_knn_arguments(k, temperature)
    check_int("chunk_size", chunk_size)
    labels = bank_labels.long()
    # Out-of-range labels would corrupt scatter_add (or assert on CUDA): fail clearly.
    check_indices("bank_labels", labels, num_classes)

    dtype = torch.promote_types(torch.promote_types(query.dtype, bank.dtype), torch.float32)
    query = F.normalize(query.to(dtype), dim=1)
    bank = F.normalize(bank.to(dtype), dim=1)
    k = min(k, bank.shape[0])

    scores = []
    with torch.autocast(query.device.type, enabled=False):  # bf16-mixed would round sims
        for start in range(0, query.shape[0], chunk_size):
            sim = query[start : start + chunk_size] @ bank.T  # [q, N]
            top_sim, top_idx = sim.topk(k, dim=1)  # [q, k]
            weights = (top_sim / temperature).exp()
            chunk_scores = torch.zeros(sim.shape[0], num_classes, dtype=dtype, device=sim.device)
            scores.append(chunk_scores.scatter_add_(1, labels[top_idx], weights))
    if not scores:
        return torch.zeros(0, num_classes, dtype=dtype, device=query.device)
    return torch.cat(scores)
