"""Effective rank of a feature matrix.

Reference: Roy & Vetterli, "The effective rank: a measure of effective dimensionality"
(EUSIPCO 2007), ``erank = exp(H(p))`` with ``p = s / Σ s`` over the singular values
``s``; used for (non-negative) contrastive features in Wang et al., "Non-negative
Contrastive Learning" (NCL), ICLR 2024.

The singular values of ``ẑ`` (``[N, d]``) are the square roots of the eigenvalues of the
Gram matrix ``S = ẑᵀẑ`` (``[d, d]``), a sum over samples, so the metric streams.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.metrics.functional.orthogonality import feature_gram


def effective_rank_from_gram(gram: Tensor) -> Tensor:
    """Effective rank from the Gram matrix ``S = ẑᵀẑ`` (float64 eigen-decomposition).

    Eigenvalues below ``d * λ_max * eps_float64`` are round-off and set to 0 (the usual
    numerical-rank tolerance), then ``s = sqrt(λ)``.

    Args:
        gram: ``[d, d]`` symmetric positive semi-definite matrix.

    Returns:
        Scalar float32 tensor in ``[1, d]``; 0 for an all-zero Gram matrix.
    """
    if gram.ndim != 2 or gram.shape[0] != gram.shape[1]:
        raise ConfigError(f"gram must have shape [d, d], got {tuple(gram.shape)}", key="gram")
    eigvals = torch.linalg.eigvalsh(gram.double())
    tol = eigvals.max().clamp_min(0.0) * gram.shape[0] * torch.finfo(torch.float64).eps
    s = torch.where(eigvals > tol, eigvals, torch.zeros_like(eigvals)).sqrt()
    total = s.sum()
    if total <= 0:
        return torch.zeros((), dtype=torch.float32, device=gram.device)
    p = s / total
    entropy = -torch.special.xlogy(p, p).sum()  # 0 * log 0 = 0
    return entropy.exp().float()


def effective_rank(z: Tensor) -> Tensor:
    """Effective rank ``exp(H(p))``, ``p = s / Σ s`` over the singular values of ``ẑ``.

    ``k`` orthogonal directions of equal norm give exactly ``k``.

    Args:
        z: Features ``[N, d]`` (rows are L2-normalised first).

    Returns:
        Scalar float32 tensor in ``[1, min(N, d)]``; 0 when every row is zero.
    """
    return effective_rank_from_gram(feature_gram(z))
