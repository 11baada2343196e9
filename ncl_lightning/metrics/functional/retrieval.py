"""Retrieval precision@k on (selected) feature dimensions.

Reference: Wang et al., "Non-negative Contrastive Learning" (NCL), ICLR 2024, Table 1
("mAP@10"): on the selected dims, features are re-normalised, neighbours are ranked by
cosine similarity (the query itself excluded), and the score is the fraction of the ``k``
nearest neighbours sharing the query's class, averaged over queries.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.foundation.validation import check_int, check_shape
from ncl_lightning.metrics.functional.sparsity import _check_features, l2_normalize_rows


def retrieval_precision(
    z: Tensor,
    labels: Tensor,
    k: int = 10,
    dims: Tensor | None = None,
    chunk_size: int = 1024,
) -> Tensor:
    """Precision@k of cosine-similarity retrieval (the NCL paper's "mAP@10").

    Queries are processed ``chunk_size`` at a time, so memory is ``O(chunk_size * N)``
    (a 10,000 × 10,000 similarity matrix never materialises). Ties in similarity are
    broken arbitrarily.

    Args:
        z: Features ``[N, d]``; each sample is a query and the others its gallery.
        labels: Integer labels ``[N]``.
        k: Number of neighbours (>= 1); clipped to ``N - 1``.
        dims: Optional int64 indices (or boolean mask ``[d]``) of the dims to keep.
        chunk_size: Queries per chunk (>= 1).

    Returns:
        Scalar float32 tensor in ``[0, 1]``.
    """
    _check_features(z, 0.0)
    check_shape("labels", labels, (z.shape[0],))
    if z.shape[0] < 2:
        raise ConfigError(f"retrieval needs at least 2 samples, got {z.shape[0]}", key="z")
    check_int("k", k)
    check_int("chunk_size", chunk_size)
    if dims is not None:
        z = z[:, dims]
    z_hat = l2_normalize_rows(z)
    n = z_hat.shape[0]
    k = min(k, n - 1)
    hits = torch.zeros((), dtype=torch.float64, device=z_hat.device)
    for start in range(0, n, chunk_size):
        stop = min(start + chunk_size, n)
        sim = z_hat[start:stop] @ z_hat.T  # [q, N]
        rows = torch.arange(stop - start, device=sim.device)
        sim[rows, rows + start] = -torch.inf  # exclude the query itself
        top_idx = sim.topk(k, dim=1).indices  # [q, k]
        hits += (labels[top_idx] == labels[start:stop, None]).sum()
    return (hits / (n * k)).float()
