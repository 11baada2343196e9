"""Semantic consistency and semantic entropy of feature dimensions.

Reference: Wang et al., "Non-negative Contrastive Learning" (NCL), ICLR 2024, Sec. 5 and
Fig. 4: an interpretable dimension fires mostly on one class. On ``ẑ = z / ||z||₂`` a
dimension ``i`` is *activated* on sample ``x`` when ``|ẑ_i(x)| > eps`` and *active* when
activated on at least one sample; both statistics average over active dimensions only.
The ``*_from_*`` helpers take the ``[d, C]`` sums over samples the streaming metrics keep.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from ncl_lightning.foundation.validation import check_choice, check_indices, check_int, check_shape
from ncl_lightning.metrics.functional.sparsity import (
    _check_features,
    activation_mask,
    l2_normalize_rows,
)

EntropyWeighting = Literal["activation", "frequency", "mean_activation"]
ENTROPY_WEIGHTINGS = ("activation", "frequency", "mean_activation")
# Classes with probability at most this are dropped from the entropy (see docs/metrics.md).
_MIN_PROB = 1e-5


def check_features_labels(z: Tensor, labels: Tensor, num_classes: int, eps: float) -> Tensor:
    """Validate ``z [N, d]``, ``labels [N]`` in ``[0, num_classes)``; return labels as int64."""
    _check_features(z, eps)
    check_int("num_classes", num_classes)
    check_shape("labels", labels, (z.shape[0],))
    labels = labels.long()
    # Out-of-range labels would break one_hot / scatter (or assert on CUDA): fail clearly.
    check_indices("labels", labels, num_classes)
    return labels


def class_activation_counts(
    z: Tensor, labels: Tensor, num_classes: int, eps: float = 1e-5
) -> Tensor:
    """``counts[i, c]`` = number of samples of class ``c`` with ``|ẑ_i| > eps``.

    Args:
        z: Features ``[N, d]``.
        labels: Integer labels ``[N]`` in ``[0, num_classes)``.
        num_classes: Number of classes ``C``.
        eps: Threshold on the row-normalised magnitude.

    Returns:
        ``[d, C]`` int64 counts.
    """
    labels = check_features_labels(z, labels, num_classes, eps)
    # float64 keeps the counts exact (below 2**53) and is never down-cast by autocast.
    mask = activation_mask(z, eps).double()
    one_hot = F.one_hot(labels, num_classes).double()
    return (mask.T @ one_hot).round().long()


def class_activation_mass(z: Tensor, labels: Tensor, num_classes: int) -> Tensor:
    """``mass[i, c] = Σ_{x ∈ c} |ẑ_i(x)|`` in float64.

    Args:
        z: Features ``[N, d]``.
        labels: Integer labels ``[N]`` in ``[0, num_classes)``.
        num_classes: Number of classes ``C``.

    Returns:
        ``[d, C]`` float64 mass.
    """
    labels = check_features_labels(z, labels, num_classes, 0.0)
    # float64: exact accumulation, and not down-cast by autocast or TF32.
    z_abs = l2_normalize_rows(z).abs().double()
    one_hot = F.one_hot(labels, num_classes).double()
    return z_abs.T @ one_hot


def semantic_consistency_from_counts(counts: Tensor, active: Tensor | None = None) -> Tensor:
    """Mean over active dims of ``100 * max_c counts[i, c] / Σ_c counts[i, c]``.

    Args:
        counts: ``[d, C]`` per-dimension class counts (activated or top-k samples).
        active: Boolean ``[d]`` dimensions to average over; default rows with a count.

    Returns:
        Scalar float32 tensor in ``[100 / C, 100]``; NaN when no dimension is active.
    """
    check_shape("counts", counts, ("d", "C"))
    counts = counts.double()
    total = counts.sum(dim=1)
    if active is None:
        active = total > 0
    ratio = counts.max(dim=1).values[active] / total[active]
    return (100.0 * ratio.mean()).float()


def semantic_entropy_from_counts(weights: Tensor, active: Tensor | None = None) -> Tensor:
    """Mean over active dims of the class entropy of ``p_i(c) ∝ weights[i, c]`` (nats).

    Classes with ``p_i(c) <= 1e-5`` are dropped from the sum.

    Args:
        weights: ``[d, C]`` non-negative class mass or counts.
        active: Boolean ``[d]`` dimensions to average over; default rows with weight.

    Returns:
        Scalar float32 tensor in ``[0, ln C]``; NaN when no dimension is active.
    """
    check_shape("weights", weights, ("d", "C"))
    weights = weights.double()
    total = weights.sum(dim=1, keepdim=True)
    if active is None:
        active = total.squeeze(1) > 0
    p = weights[active] / total[active].clamp_min(torch.finfo(torch.float64).tiny)
    p = torch.where(p > _MIN_PROB, p, torch.zeros_like(p))
    entropy = -torch.special.xlogy(p, p).sum(dim=1)  # 0 * log 0 = 0
    return entropy.mean().float()


def semantic_consistency(
    z: Tensor,
    labels: Tensor,
    num_classes: int,
    eps: float = 1e-5,
    top_k: int | None = None,
) -> Tensor:
    """Semantic consistency (×100) of the active dimensions (NCL, Sec. 5).

    For each active dimension ``i``, among the samples with ``|ẑ_i| > eps`` (or, with
    ``top_k``, the ``k`` samples with the largest ``ẑ_i``, ``k`` clipped to ``N``), the
    percentage that belongs to the most frequent class; averaged over active dims.
    Dense features on a balanced set give exactly ``100 / C``; one-hot class features 100.

    Args:
        z: Features ``[N, d]``.
        labels: Integer labels ``[N]`` in ``[0, num_classes)``.
        num_classes: Number of classes ``C``.
        eps: Threshold on the row-normalised magnitude.
        top_k: If set (>= 1), use the ``top_k`` most activated samples of each dim
            (ties broken arbitrarily).

    Returns:
        Scalar float32 tensor in ``[100 / C, 100]``; NaN when no dimension is active.
    """
    labels = check_features_labels(z, labels, num_classes, eps)
    if top_k is None:
        return semantic_consistency_from_counts(
            class_activation_counts(z, labels, num_classes, eps)
        )
    check_int("top_k", top_k)
    z_hat = l2_normalize_rows(z)
    active = (z_hat.abs() > eps).any(dim=0)
    k = min(top_k, z.shape[0])
    top_idx = z_hat.topk(k, dim=0).indices  # [k, d]
    return semantic_consistency_from_counts(
        top_k_class_counts(labels[top_idx], num_classes), active
    )


def top_k_class_counts(top_labels: Tensor, num_classes: int, valid: Tensor | None = None) -> Tensor:
    """``counts[i, c]`` = how many of the selected samples of dim ``i`` have class ``c``.

    Args:
        top_labels: ``[k, d]`` labels of each dimension's selected samples.
        num_classes: Number of classes ``C``.
        valid: Optional boolean ``[k, d]``; ``False`` entries are not counted.

    Returns:
        ``[d, C]`` int64 counts.
    """
    ones = torch.ones_like(top_labels) if valid is None else valid.long()
    labels = top_labels.clamp_min(0)  # invalid slots may hold -1; they add 0 anyway
    counts = torch.zeros(top_labels.shape[1], num_classes, dtype=torch.long, device=labels.device)
    return counts.scatter_add_(1, labels.T, ones.T)


def semantic_entropy(
    z: Tensor,
    labels: Tensor,
    num_classes: int,
    eps: float = 1e-5,
    weighting: EntropyWeighting = "activation",
) -> Tensor:
    """Semantic entropy ``H_s`` in nats of the active dimensions (BayesNCL paper, ICML
    2026); lower is better.

    Per active dimension ``i``: ``p_i(c) ∝ Σ_{x ∈ c} |ẑ_i(x)|`` ("activation", the paper's
    definition), ``p_i(c) ∝ #{x ∈ c : |ẑ_i(x)| > eps}`` ("frequency", reported as
    "semantic entropy (frequency)") or ``p_i(c) ∝ Σ_{x ∈ c} |ẑ_i(x)| / N_c``
    ("mean_activation": each class's mean, the release's "mean activation" variant, equal
    to "activation" on a balanced split); entropy over classes with ``p > 1e-5``; averaged
    over active dims. Dense features on a balanced set give ~``ln C``; one-hot class features 0.

    Args:
        z: Features ``[N, d]``.
        labels: Integer labels ``[N]`` in ``[0, num_classes)``.
        num_classes: Number of classes ``C``.
        eps: Threshold on the row-normalised magnitude (defines active dims).
        weighting: ``"activation"``, ``"frequency"`` or ``"mean_activation"``.

    Returns:
        Scalar float32 tensor in ``[0, ln C]``; NaN when no dimension is active.
    """
    check_choice("weighting", weighting, ENTROPY_WEIGHTINGS)
    counts = class_activation_counts(z, labels, num_classes, eps)
    active = counts.sum(dim=1) > 0
    if weighting == "frequency":
        return semantic_entropy_from_counts(counts, active)
    mass = class_activation_mass(z, labels, num_classes)
    if weighting == "mean_activation":
        mass = per_class_mean(mass, torch.bincount(labels.long(), minlength=num_classes))
    return semantic_entropy_from_counts(mass, active)


def per_class_mean(mass: Tensor, class_sizes: Tensor) -> Tensor:
    """``mass[i, c] / N_c`` for ``mass`` ``[d, C]`` and class sizes ``[C]`` (0 where a class
    has no sample)."""
    sizes = class_sizes.to(mass.dtype)
    return torch.where(sizes > 0, mass / sizes.clamp(min=1), torch.zeros_like(mass))
