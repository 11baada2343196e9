"""Retrieval precision@k on (selected) feature dimensions.

Reference: Wang et al., "Non-negative Contrastive Learning" (NCL), ICLR 2024, Table 1
("mAP@10"): on the selected dims, features are re-normalised, neighbours are ranked by
cosine similarity (the query itself excluded), and the score is the fraction of the ``k``
nearest neighbours sharing the query's class, averaged over queries.

``distance="euclidean"`` is the NCL release's ``main_eval.py`` retrieval: rows are
normalised over all ``d`` dimensions first, the kept dimensions are taken *without*
re-normalising, and neighbours are ranked by Euclidean distance. On all dimensions it ranks
as the cosine does (for non-zero rows); on a subset it does not.
"""

from __future__ import annotations

from typing import Literal, get_args

import torch
from torch import Tensor

from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.foundation.validation import check_choice, check_int, check_shape
from ncl_lightning.metrics.functional.sparsity import _check_features, l2_normalize_rows

RetrievalDistance = Literal["cosine", "euclidean"]
RETRIEVAL_DISTANCES: tuple[str, ...] = get_args(RetrievalDistance)


def retrieval_precision(
    z: Tensor,
    labels: Tensor,
    k: int = 10,
    dims: Tensor | None = None,
    chunk_size: int = 1024,
    distance: RetrievalDistance = "cosine",
) -> Tensor:
    """Precision@k of cosine-similarity retrieval (the NCL paper's "mAP@10").

    Queries are processed ``chunk_size`` at a time, so memory is ``O(chunk_size * N)``
    (a 10,000 × 10,000 similarity matrix never materialises). The Euclidean distances are
    computed in float64. Ties in similarity are
    broken arbitrarily.

    Args:
        z: Features ``[N, d]``; each sample is a query and the others its gallery.
        labels: Integer labels ``[N]``.
        k: Number of neighbours (>= 1); clipped to ``N - 1``.
        dims: Optional int64 indices (or boolean mask ``[d]``) of the dims to keep.
        chunk_size: Queries per chunk (>= 1).
        distance: ``"cosine"`` (ours: the kept dims re-normalised, largest cosine) or
            ``"euclidean"`` (NCL ``main_eval.py``: ``ẑ`` normalised over all dims, the kept
            dims not re-normalised, smallest Euclidean distance).

    Returns:
        Scalar float32 tensor in ``[0, 1]``.
    """
    _check_features(z, 0.0)
    check_shape("labels", labels, (z.shape[0],))
    if z.shape[0] < 2:
        raise ConfigError(f"retrieval needs at least 2 samples, got {z.shape[0]}", key="z")
    check_int("k", k)
    check_int("chunk_size", chunk_size)
    check_choice("distance", distance, RETRIEVAL_DISTANCES)
    euclidean = distance == "euclidean"
    if euclidean:  # normalise over all dims, then keep the dims as they are
        z_hat = l2_normalize_rows(z)
        # float64: 2 a·b − ‖b‖² cancels; in float32 it misranks near-equal rows
        z_hat = (z_hat if dims is None else z_hat[:, dims]).double()
        # -‖a − b‖² = 2 a·b − ‖b‖² − ‖a‖²: the query's ‖a‖² does not change its ranking.
        sq_norms = z_hat.square().sum(dim=1)
    else:
        z_hat = l2_normalize_rows(z if dims is None else z[:, dims])
    n = z_hat.shape[0]
    k = min(k, n - 1)
    hits = torch.zeros((), dtype=torch.float64, device=z_hat.device)
    for start in range(0, n, chunk_size):
        stop = min(start + chunk_size, n)
        sim = z_hat[start:stop] @ z_hat.T  # [q, N]
        if euclidean:
            sim = 2 * sim - sq_norms[None, :]
        rows = torch.arange(stop - start, device=sim.device)
        sim[rows, rows + start] = -torch.inf  # exclude the query itself
        top_idx = sim.topk(k, dim=1).indices  # [q, k]
        hits += (labels[top_idx] == labels[start:stop, None]).sum()
    return (hits / (n * k)).float()
