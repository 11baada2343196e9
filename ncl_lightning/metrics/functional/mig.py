"""Mutual Information Gap (MIG) of a code against discrete ground-truth factors.

Reference: Chen et al., "Isolating Sources of Disentanglement in Variational
Autoencoders", NeurIPS 2018; the estimator follows disentanglement_lib (Locatello et al.,
ICML 2019): each code dimension is discretised into ``num_bins`` equal-width bins between
its min and max over the samples (``np.digitize(x, np.histogram(x, num_bins)[1][:-1])``),
the mutual information (nats) with every factor is read off the joint count table, and

    MIG = mean_k (I(z_{j₁}; v_k) - I(z_{j₂}; v_k)) / H(v_k),

where ``j₁``, ``j₂`` are the code dims with the largest and second largest MI with factor
``k``. Factors with zero entropy are skipped; a one-dimensional code uses ``I(z; v_k)``.
The NCL paper (Wang et al., ICLR 2024, Table 6) reports it on dSprites.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.foundation.validation import check_int


def check_codes_factors(codes: Tensor, factors: Tensor) -> None:
    """Validate codes ``[N, d]`` (d >= 1) and integer factors ``[N, K]`` (K >= 1)."""
    if codes.ndim != 2 or codes.shape[1] < 1:
        raise ConfigError(
            f"codes must have shape [N, d] with d >= 1, got {tuple(codes.shape)}", key="codes"
        )
    if factors.ndim != 2 or factors.shape[1] < 1:
        raise ConfigError(
            f"factors must have shape [N, K] with K >= 1, got {tuple(factors.shape)}", key="factors"
        )
    if factors.shape[0] != codes.shape[0]:
        raise ConfigError(
            f"codes have {codes.shape[0]} rows but factors have {factors.shape[0]}", key="codes"
        )
    if factors.is_floating_point() or factors.is_complex():
        raise ConfigError(
            f"factors must be integer labels, got dtype {factors.dtype}", key="factors"
        )


def histogram_discretize(codes: Tensor, num_bins: int = 20) -> Tensor:
    """Equal-width binning of each column between its min and max (disentanglement_lib).

    Bin ``b`` holds ``edge_b <= x < edge_{b+1}`` with ``edge_b = min + b (max - min) /
    num_bins``; the maximum falls in the last bin and a constant column in one bin.

    Args:
        codes: Real codes ``[N, d]`` (N >= 1).
        num_bins: Bins per dimension (>= 1).

    Returns:
        int64 ``[N, d]`` bin indices in ``[0, num_bins)``.
    """
    check_int("num_bins", num_bins)
    if codes.ndim != 2 or codes.shape[0] < 1:
        raise ConfigError(
            f"codes must have shape [N, d] with N >= 1, got {tuple(codes.shape)}", key="codes"
        )
    x = codes.detach().double().T.contiguous()  # [d, N]
    if not torch.isfinite(x).all():
        raise ConfigError("codes must be finite", key="codes")
    low, high = x.min(dim=1, keepdim=True).values, x.max(dim=1, keepdim=True).values
    steps = torch.arange(num_bins, dtype=x.dtype, device=x.device) / num_bins
    edges = low + (high - low) * steps  # [d, num_bins] left edges
    # Number of left edges <= x, minus one (np.digitize counts from 1).
    return (torch.searchsorted(edges, x, right=True) - 1).T


def _dense_labels(columns: Tensor) -> tuple[Tensor, int]:
    """Relabel each column of ``[N, m]`` to ``0..n_j - 1``; return labels and ``max n_j``."""
    out = torch.empty_like(columns, dtype=torch.long)
    size = 1
    for j in range(columns.shape[1]):
        values, out[:, j] = torch.unique(columns[:, j], return_inverse=True)
        size = max(size, values.numel())
    return out, size


def _mi_from_joint(joint: Tensor) -> Tensor:
    """MI (nats) of ``[..., A, B]`` joint count tables, over the last two dims."""
    joint = joint.double()
    total = joint.sum(dim=(-2, -1), keepdim=True)
    outer = joint.sum(dim=-1, keepdim=True) * joint.sum(dim=-2, keepdim=True)
    ratio = torch.where(joint > 0, joint * total / outer.clamp_min(1), torch.ones_like(joint))
    return (joint * ratio.log()).sum(dim=(-2, -1)) / total[..., 0, 0]


def discrete_mutual_info(codes_discrete: Tensor, factors: Tensor) -> Tensor:
    """Mutual information (nats) between every discrete code dim and every factor.

    Equals ``sklearn.metrics.mutual_info_score`` per pair. Joint counts come from one
    ``bincount`` of combined indices per code dim, vectorised over samples and factors.

    Args:
        codes_discrete: Integer codes ``[N, d]`` (any label values).
        factors: Integer factor labels ``[N, K]`` (any label values).

    Returns:
        float64 ``[d, K]`` mutual information.
    """
    check_codes_factors(codes_discrete, factors)
    if codes_discrete.is_floating_point():
        raise ConfigError(
            f"codes_discrete must be integer, got dtype {codes_discrete.dtype}",
            key="codes_discrete",
        )
    codes, n_codes = _dense_labels(codes_discrete)
    labels, n_labels = _dense_labels(factors)
    num_factors = labels.shape[1]
    offsets = torch.arange(num_factors, device=labels.device) * n_codes * n_labels
    rows = []
    for j in range(codes.shape[1]):
        combined = offsets + codes[:, j : j + 1] * n_labels + labels  # [N, K]
        joint = torch.bincount(combined.reshape(-1), minlength=num_factors * n_codes * n_labels)
        rows.append(_mi_from_joint(joint.reshape(num_factors, n_codes, n_labels)))
    return torch.stack(rows)


def discrete_entropy(factors: Tensor) -> Tensor:
    """Entropy (nats) of each column of integer labels ``[N, K]``: float64 ``[K]``."""
    labels, n_labels = _dense_labels(factors)
    counts = torch.zeros(labels.shape[1], n_labels, dtype=torch.float64, device=labels.device)
    counts.scatter_add_(1, labels.T, torch.ones_like(labels.T, dtype=torch.float64))
    p = counts / labels.shape[0]
    return -torch.special.xlogy(p, p).sum(dim=1)


def mutual_information_gap_per_factor(codes: Tensor, factors: Tensor, num_bins: int = 20) -> Tensor:
    """Normalised gap ``(I(z_{j₁}; v_k) - I(z_{j₂}; v_k)) / H(v_k)`` of every factor: float64
    ``[K]`` in ``[0, 1]``, NaN for a constant factor; arguments as [`mutual_information_gap`][].
    """
    check_codes_factors(codes, factors)
    mi = discrete_mutual_info(histogram_discretize(codes, num_bins), factors)  # [d, K]
    entropy = discrete_entropy(factors)
    top = mi.topk(min(2, mi.shape[0]), dim=0).values
    gap = top[0] - top[1] if top.shape[0] > 1 else top[0]
    keep = entropy > 0
    return torch.where(keep, gap / entropy.where(keep, 1.0), torch.nan)


def mutual_information_gap(codes: Tensor, factors: Tensor, num_bins: int = 20) -> Tensor:
    """MIG of ``codes`` w.r.t. ``factors`` (Chen et al., 2018; disentanglement_lib).

    Args:
        codes: Real codes ``[N, d]`` (N >= 1).
        factors: Integer ground-truth factor labels ``[N, K]``.
        num_bins: Equal-width bins per code dim (>= 1). Factors with more than
            ``num_bins`` values share bins, which caps their gap below 1.

    Returns:
        Scalar float64 MIG in ``[0, 1]``; NaN when every factor is constant.
    """
    return mutual_information_gap_per_factor(codes, factors, num_bins).nanmean()
