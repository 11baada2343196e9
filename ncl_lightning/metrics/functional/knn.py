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


def check_knn_arguments(k: int, temperature: float, prefix: str = "") -> None:
    """One-line errors for the neighbour count (>= 1) and the vote temperature (> 0)."""
    if k < 1:
        raise ConfigError(f"{prefix}k must be >= 1, got {k}", key=f"{prefix}k")
    if not temperature > 0.0:
        raise ConfigError(
            f"{prefix}temperature must be > 0, got {temperature}", key=f"{prefix}temperature"
        )


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
    if bank_labels.shape != (bank.shape[0],):
        raise ConfigError(
            f"bank_labels must have shape [{bank.shape[0]}], got {tuple(bank_labels.shape)}",
            key="bank_labels",
        )
    if bank.shape[0] == 0:
        raise ConfigError("bank must hold at least one sample", key="bank")
    if num_classes < 1:
        raise ConfigError(f"num_classes must be >= 1, got {num_classes}", key="num_classes")
    check_knn_arguments(k, temperature)
    if chunk_size < 1:
        raise ConfigError(f"chunk_size must be >= 1, got {chunk_size}", key="chunk_size")
    labels = bank_labels.long()
    # Out-of-range labels would corrupt scatter_add (or assert on CUDA): fail clearly.
    if labels.min() < 0 or labels.max() >= num_classes:
        raise ConfigError(f"bank_labels must lie in [0, {num_classes})", key="bank_labels")

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
