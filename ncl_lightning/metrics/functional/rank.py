"""Effective rank of a feature matrix.

Reference: Roy & Vetterli, "The effective rank: a measure of effective dimensionality"
(EUSIPCO 2007), ``erank = exp(H(p))`` with ``p = s / Σ s`` over the singular values
``s``; used for (non-negative) contrastive features in Wang et al., "Non-negative
Contrastive Learning" (NCL), ICLR 2024. The singular values of ``ẑ`` (``[N, d]``) are the
square roots of the eigenvalues of the Gram matrix ``S = ẑᵀẑ``, a sum over samples, so
the metric streams.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.metrics.functional.orthogonality import feature_gram


def spectral_entropy_from_gram(gram: Tensor) -> Tensor:
    """Spectral entropy ``H(p) = −Σ p ln p``, ``p = s / Σ s``, from ``S = ẑᵀẑ`` (nats).

    The quantity the NCL and BayesNCL releases log as ``effective_rank``; ours is its
    exponential, see
    [`effective_rank_from_gram`][ncl_lightning.metrics.functional.effective_rank_from_gram].
    Eigenvalues below ``d * λ_max * eps_float64`` are round-off and set to 0, then
    ``s = sqrt(λ)``; ``0 · ln 0 = 0``.

    Args:
        gram: ``[d, d]`` symmetric positive semi-definite matrix.

    Returns:
        Scalar float32 tensor in ``[0, ln d]``; 0 for an all-zero Gram matrix.
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
    return (-torch.special.xlogy(p, p).sum()).float()  # 0 * log 0 = 0


def effective_rank_from_gram(gram: Tensor) -> Tensor:
    """Effective rank from the Gram matrix ``S = ẑᵀẑ``: the exponential of
    [`spectral_entropy_from_gram`][ncl_lightning.metrics.functional.spectral_entropy_from_gram].

    Args:
        gram: ``[d, d]`` symmetric positive semi-definite matrix.

    Returns:
        Scalar float32 tensor in ``[1, d]``; 0 for an all-zero Gram matrix.
    """
    entropy = spectral_entropy_from_gram(gram)
    if not gram.any():
        return entropy  # 0, not exp(0) = 1
    return entropy.double().exp().float()


def effective_rank(z: Tensor) -> Tensor:
    """Effective rank ``exp(H(p))``, ``p = s / Σ s`` over the singular values of ``ẑ``.

    ``k`` orthogonal directions of equal norm give exactly ``k``.

    Args:
        z: Features ``[N, d]`` (rows are L2-normalised first).

    Returns:
        Scalar float32 tensor in ``[1, min(N, d)]``; 0 when every row is zero.
    """
    return effective_rank_from_gram(feature_gram(z))


def spectral_entropy(z: Tensor) -> Tensor:
    """Spectral entropy ``H(p) = ln(effective_rank)`` of ``ẑ``, in nats.

    The NCL release (``solo/methods/simclr.py``, ``erank``) and the BayesNCL release log
    this quantity under the name ``effective_rank``, computed as
    ``−Σ p ln(p + 1e-6)`` over the singular values of the first training batch; the
    ``1e-6`` changes the value by at most ``min(N, d) · 1e-6``.
    ``k`` orthogonal directions of equal norm give exactly ``ln k``.

    Args:
        z: Features ``[N, d]`` (rows are L2-normalised first).

    Returns:
        Scalar float32 tensor in ``[0, ln min(N, d)]``; 0 when every row is zero.
    """
    return spectral_entropy_from_gram(feature_gram(z))
