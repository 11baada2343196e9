"""Orthogonality error of feature dimensions.

Reference: Wang et al., "Non-negative Contrastive Learning" (NCL), ICLR 2024, Sec. 5:
NCL features are near-orthogonal across dimensions. On the active dimensions, each
column of ``ẑ = z / ||z||₂`` is L2-normalised over samples, ``G = FᵀF``, and the error is
the mean ``|G_ij|`` over ``i ≠ j`` (0 = orthogonal).

Everything goes through the (uncentred) Gram matrix ``S = ẑᵀẑ``, which is a sum over
samples and therefore streams: ``G_ij = S_ij / sqrt(S_ii S_jj)``. The releases reduce the
same ``|G − I|`` differently (``reduction``; docs/metrics.md, "Compare with the paper").
"""

from __future__ import annotations

from typing import Literal, get_args

import torch
from torch import Tensor

from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.foundation.validation import check_choice
from ncl_lightning.metrics.functional.sparsity import (
    _check_features,
    activation_mask,
    l2_normalize_rows,
)

OrthogonalityReduction = Literal["off_diagonal", "mean_all_entries", "median_all_entries"]
ORTHOGONALITY_REDUCTIONS: tuple[str, ...] = get_args(OrthogonalityReduction)


def feature_gram(z: Tensor) -> Tensor:
    """Gram matrix ``S = ẑᵀẑ`` of the row-normalised features, in float64.

    float64 keeps the small eigenvalues of ``S`` meaningful for ``effective_rank`` and
    makes sums over many batches exact to ~1e-16.

    Args:
        z: Features ``[N, d]``.

    Returns:
        ``[d, d]`` float64 symmetric positive semi-definite matrix.
    """
    _check_features(z, 0.0)
    z_hat = l2_normalize_rows(z).double()
    return z_hat.T @ z_hat


def orthogonality_error_from_gram(
    gram: Tensor, active: Tensor, reduction: OrthogonalityReduction = "off_diagonal"
) -> Tensor:
    """Orthogonality error from a Gram matrix and the active-dimension mask.

    Args:
        gram: ``S = ẑᵀẑ`` summed over samples, ``[d, d]``.
        active: Boolean ``[d]``, dimensions with ``|ẑ| > eps`` on at least one sample.
        reduction: Over the ``m`` active dimensions: ``"off_diagonal"`` (ours), the mean
            ``|G_ij|`` over ``i ≠ j``; ``"mean_all_entries"`` (NCL training log,
            ``solo/methods/simclr.py``), the mean of ``|G − I|`` over all ``m²`` entries
            (``= OE · (m − 1)/m``); ``"median_all_entries"`` (NCL ``main_eval.py``), their
            ``torch.median`` (the lower middle value).

    Returns:
        Scalar float32 tensor in ``[0, 1]``; 0 when fewer than 2 dimensions are active.
    """
    check_choice("reduction", reduction, ORTHOGONALITY_REDUCTIONS)
    if gram.ndim != 2 or gram.shape[0] != gram.shape[1]:
        raise ConfigError(f"gram must have shape [d, d], got {tuple(gram.shape)}", key="gram")
    if active.shape != (gram.shape[0],):
        raise ConfigError(
            f"active must have shape [{gram.shape[0]}], got {tuple(active.shape)}", key="active"
        )
    idx = active.nonzero().squeeze(1)
    m = idx.numel()
    if m < 2:
        return torch.zeros((), dtype=torch.float32, device=gram.device)
    sub = gram.double()[idx][:, idx]
    # Active columns have at least one entry > eps, so their norm is > 0.
    inv_norm = sub.diagonal().clamp_min(torch.finfo(torch.float64).tiny).rsqrt()
    cos = (sub * inv_norm[:, None] * inv_norm[None, :]).abs()
    if reduction != "off_diagonal":  # |G − I| with an exact 0 on the diagonal
        deviation = cos.fill_diagonal_(0.0)
        if reduction == "mean_all_entries":
            return deviation.mean().float()
        return deviation.flatten().median().float()
    # Total minus diagonal can round below zero when every off-diagonal entry is 0.
    off_diag_sum = (cos.sum() - cos.diagonal().sum()).clamp_min(0.0)
    return (off_diag_sum / (m * (m - 1))).float()


def orthogonality_error(
    z: Tensor, eps: float = 1e-5, reduction: OrthogonalityReduction = "off_diagonal"
) -> Tensor:
    """Mean absolute cosine between the sample-columns of active dimensions (NCL, Sec. 5).

    ``F`` = columns of ``ẑ`` on active dimensions (``|ẑ| > eps`` on at least one sample),
    each L2-normalised over samples; ``G = FᵀF``; result = mean ``|G_ij|`` over ``i ≠ j``.
    One-hot (disjoint-support) features give 0; identical columns give 1.

    Args:
        z: Features ``[N, d]``.
        eps: Threshold on the row-normalised magnitude.
        reduction: ``"off_diagonal"`` (ours), or a release's reduction of ``|G − I|``:
            ``"mean_all_entries"`` or ``"median_all_entries"`` (see
            [`orthogonality_error_from_gram`][ncl_lightning.metrics.functional.orthogonality_error_from_gram]).

    Returns:
        Scalar float32 tensor in ``[0, 1]``; 0 when fewer than 2 dimensions are active.
    """
    active = activation_mask(z, eps).any(dim=0)
    return orthogonality_error_from_gram(feature_gram(z), active, reduction)
