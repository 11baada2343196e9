"""Sparsity and dead-dimension statistics of (non-negative) features.

Definitions follow the NCL paper (Wang et al., "Non-negative Contrastive Learning",
ICLR 2024): features are L2-normalised per sample, ``ẑ = z / ||z||₂``, and an entry
counts as zero when ``|ẑ| <= eps``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ncl_lightning.foundation.validation import check_at_least, check_shape


def _check_features(z: Tensor, eps: float) -> None:
    check_shape("features", z, ("N", "d"))
    check_at_least("eps", eps, 0.0)


def l2_normalize_rows(z: Tensor) -> Tensor:
    """``ẑ = z / ||z||₂`` per row, in at least float32; an all-zero row stays zero.

    Args:
        z: Features ``[N, d]``.

    Returns:
        Row-normalised features ``[N, d]``.
    """
    z = z.float() if z.dtype in (torch.float16, torch.bfloat16) or not z.is_floating_point() else z
    norms = torch.linalg.vector_norm(z, dim=1, keepdim=True)
    # Exact division for non-zero rows; the clamp only keeps zero rows at 0 (not NaN).
    return z / norms.clamp_min(torch.finfo(z.dtype).tiny)


def activation_mask(z: Tensor, eps: float = 1e-5, normalize: bool = True) -> Tensor:
    """Which entries are active: ``|ẑ| > eps``.

    Args:
        z: Features ``[N, d]``.
        eps: Threshold on the row-normalised magnitude.
        normalize: Threshold ``|ẑ|`` (True) or the raw ``|z|`` (False, scale-dependent).

    Returns:
        Boolean mask ``[N, d]``.
    """
    _check_features(z, eps)
    return (l2_normalize_rows(z) if normalize else z).abs() > eps


def zero_fraction(z: Tensor, eps: float = 1e-5, normalize: bool = True) -> Tensor:
    """Per-sample fraction of (near-)zero entries, ``mean_j [|ẑ_j| <= eps]``.

    Args:
        z: Features ``[N, d]``.
        eps: Threshold on the row-normalised magnitude.
        normalize: Threshold ``|ẑ|`` (True) or the raw ``|z|`` (False).

    Returns:
        ``[N]`` float tensor; a zero row gives 1.
    """
    return (~activation_mask(z, eps, normalize)).float().mean(dim=1)


def sparsity(z: Tensor, eps: float = 1e-5, normalize: bool = True) -> Tensor:
    """Sparsity: per-sample zero fraction averaged over samples (NCL paper, Fig. 3).

    Dense CL features give ~0; NCL features on CIFAR-10 ~0.7-0.9. ``eps=1e-2,
    normalize=False`` is the sparsity of the NCL release's ``main_eval.py`` (``|z| < 1e-2``
    on the unnormalised features, there in percent; see docs/metrics.md, "Compare with the
    paper").

    Args:
        z: Features ``[N, d]``.
        eps: Threshold on the row-normalised magnitude (on ``|z|`` without ``normalize``).
        normalize: Threshold ``|ẑ|`` (True, ours) or the raw ``|z|`` (False).

    Returns:
        Scalar float tensor in ``[0, 1]`` (NaN for ``N = 0``).
    """
    return zero_fraction(z, eps, normalize).mean()


def active_dimensions(z: Tensor, eps: float = 1e-5) -> Tensor:
    """Number of dimensions active (``|ẑ| > eps``) on at least one sample.

    The remaining ``d - active`` dimensions are "dead".

    Args:
        z: Features ``[N, d]``.
        eps: Threshold on the row-normalised magnitude.

    Returns:
        Scalar int64 tensor in ``[0, d]``.
    """
    return activation_mask(z, eps).any(dim=0).sum()


def activation_rate(z: Tensor, eps: float = 1e-5) -> Tensor:
    """Fraction of active dimensions, ``active_dimensions / d``.

    Args:
        z: Features ``[N, d]``.
        eps: Threshold on the row-normalised magnitude.

    Returns:
        Scalar float tensor in ``[0, 1]``.
    """
    return active_dimensions(z, eps).float() / z.shape[1]
