"""Per-dimension profile of features: what a feature atlas shows for every dimension
(NCL, Wang et al., ICLR 2024, Sec. 5-6 and Figure 1). Every part is a sum or a top-k over
samples, so it streams over batches and merges over ranks in ``O(d · (C + k))`` memory.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.foundation.validation import check_int, check_shape
from ncl_lightning.metrics.functional.semantic import (
    check_features_labels,
    class_activation_counts,
    class_activation_mass,
)
from ncl_lightning.metrics.functional.sparsity import l2_normalize_rows

EMPTY_INDEX = -1  # a top-k slot that holds no sample yet


class ProfileSums(NamedTuple):
    """Additive statistics of ``N`` samples (each entry is a sum over samples)."""

    num_samples: Tensor  # scalar int64 N
    ea_sum: Tensor  # [d] float64 Σ_x ẑ_i(x)
    class_counts: Tensor  # [d, C] int64 #{x ∈ c : |ẑ_i(x)| > eps}
    class_mass: Tensor  # [d, C] float64 Σ_{x ∈ c} |ẑ_i(x)|


def profile_sums(z: Tensor, labels: Tensor, num_classes: int, eps: float = 1e-5) -> ProfileSums:
    """The additive part of the profile of features ``[N, d]`` with labels ``[N]``."""
    labels = check_features_labels(z, labels, num_classes, eps)
    return ProfileSums(
        num_samples=torch.tensor(z.shape[0], dtype=torch.long, device=z.device),
        ea_sum=l2_normalize_rows(z).double().sum(dim=0),
        class_counts=class_activation_counts(z, labels, num_classes, eps),
        class_mass=class_activation_mass(z, labels, num_classes),
    )


def merge_top_k(values: Tensor, index: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """The ``k`` largest of candidate ``values [M, d]`` per column with their sample ``index``.

    Ties go to the smaller sample index, so the result does not depend on the order in
    which batches or ranks arrive. Empty slots (index ``-1``) hold ``-inf`` and come last.

    Args:
        values: Candidate values ``[M, d]``; leading dimensions are flattened (the
            ``[R, k, d]`` slots of ``R`` ranks, stacked by a ``"cat"`` reduction).
        index: Their sample indices, ``values``' shape (int64, ``-1`` for an empty slot).
        k: Slots kept (``M`` may be smaller: the rest stay empty).

    Returns:
        ``(values [k, d], index [k, d])``, largest value first.
    """
    if values.shape != index.shape or values.ndim < 2:
        raise ConfigError(
            f"values and index must be [M, d] alike, got {tuple(values.shape)} "
            f"and {tuple(index.shape)}",
            key="index",
        )
    values, index = values.reshape(-1, values.shape[-1]), index.reshape(-1, index.shape[-1])
    values = torch.where(index == EMPTY_INDEX, torch.full_like(values, -torch.inf), values)
    # Lexicographic (value desc, index asc): a stable sort by index, then by value.
    by_index = index.masked_fill(index == EMPTY_INDEX, torch.iinfo(torch.long).max)
    order = by_index.argsort(dim=0, stable=True)
    values, index = values.gather(0, order), index.gather(0, order)
    order = values.argsort(dim=0, descending=True, stable=True)[:k]
    values, index = values.gather(0, order), index.gather(0, order)
    if values.shape[0] < k:  # fewer candidates than slots
        pad = k - values.shape[0]
        values = torch.cat([values, values.new_full((pad, values.shape[1]), -torch.inf)])
        index = torch.cat([index, index.new_full((pad, index.shape[1]), EMPTY_INDEX)])
    return values, index


def top_activating(z: Tensor, sample_index: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """Each dimension's ``k`` samples with the largest ``ẑ_i`` among ``z [N, d]`` (dataset
    indices ``sample_index [N]``): ``(values [k, d], index [k, d])`` as [`merge_top_k`][]."""
    check_shape("sample_index", sample_index, (z.shape[0],))
    z_hat = l2_normalize_rows(z)
    index = sample_index.long().to(z.device)[:, None].expand_as(z_hat)
    return merge_top_k(z_hat, index, k)


class DimensionProfile(NamedTuple):
    """Per-dimension statistics of ``N`` samples (what [`dimension_profile`][] returns)."""

    num_samples: Tensor  # scalar int64 N
    expected_activation: Tensor  # [d] float64
    frequency: Tensor  # [d] float64 share of samples with |ẑ_i| > eps
    consistency: Tensor  # [d] float64 percent in the majority class; NaN if dead
    majority: Tensor  # [d] int64 majority class; -1 if dead
    class_counts: Tensor  # [d, C] int64 activating samples per class
    class_mass: Tensor  # [d, C] float64
    top_values: Tensor  # [k, d] ẑ_i of the top samples; -inf in empty slots
    top_index: Tensor  # [k, d] int64 their sample indices; -1 in empty slots
    dead: Tensor  # [d] bool: no sample activates the dimension


class ClassCountSummary(NamedTuple):
    """Per-dimension reading of activating-sample class counts (what
    [`summarize_class_counts`][ncl_lightning.metrics.functional.profile.summarize_class_counts]
    returns)."""

    consistency: Tensor  # [d] float64 percent in the majority class; NaN if dead
    majority: Tensor  # [d] int64 majority class; -1 if dead
    dead: Tensor  # [d] bool: no sample activates the dimension


def summarize_class_counts(class_counts: Tensor) -> ClassCountSummary:
    """Consistency ``100 · max_c n_ic / Σ_c n_ic``, majority class and never-activated
    dimensions of class counts ``n [d, C]`` of the activating samples.

    Args:
        class_counts: ``[d, C]`` counts (any numeric dtype).

    Returns:
        [`ClassCountSummary`][ncl_lightning.metrics.functional.profile.ClassCountSummary]:
        NaN consistency and majority ``-1`` for a dimension no sample activates.
    """
    total = class_counts.sum(dim=1)
    dead = total == 0
    best = class_counts.max(dim=1)
    consistency = 100.0 * best.values.double() / total.double()
    return ClassCountSummary(
        consistency=consistency.masked_fill(dead, float("nan")),
        majority=best.indices.masked_fill(dead, -1),
        dead=dead,
    )


def activation_frequency(activation_count: Tensor, num_samples: Tensor) -> Tensor:
    """Share ``[d]`` (float64) of ``num_samples`` samples that activate each dimension."""
    return activation_count.double() / num_samples.double()


def profile_from_sums(sums: ProfileSums, top_values: Tensor, top_index: Tensor) -> DimensionProfile:
    """The per-dimension profile from merged sums and top-k slots."""
    counts = sums.class_counts
    summary = summarize_class_counts(counts)
    return DimensionProfile(
        num_samples=sums.num_samples,
        expected_activation=sums.ea_sum / sums.num_samples.double(),
        frequency=activation_frequency(counts.sum(dim=1), sums.num_samples),
        consistency=summary.consistency,
        majority=summary.majority,
        class_counts=counts,
        class_mass=sums.class_mass,
        top_values=top_values,
        top_index=top_index,
        dead=summary.dead,
    )


def dimension_profile(
    z: Tensor,
    labels: Tensor,
    num_classes: int,
    eps: float = 1e-5,
    top_k: int = 16,
    sample_index: Tensor | None = None,
) -> DimensionProfile:
    """Per-dimension profile of features ``z [N, d]`` with labels ``[N]``.

    The means over dimensions of the live ``consistency`` values and of the per-dimension
    entropies of ``class_mass`` are the semantic consistency and ``H_s`` of
    ``semantic``; ``1 - mean(frequency)`` is the
    sparsity.

    Args:
        z: Features ``[N, d]``.
        labels: Integer labels ``[N]`` in ``[0, num_classes)``.
        num_classes: Number of classes ``C``.
        eps: Activation threshold on ``|ẑ|``.
        top_k: Samples kept per dimension (by largest ``ẑ_i``).
        sample_index: Dataset index of each row (default ``0..N-1``).

    Returns:
        ``DimensionProfile``.
    """
    check_int("top_k", top_k)
    if sample_index is None:
        sample_index = torch.arange(z.shape[0], device=z.device)
    sums = profile_sums(z, labels, num_classes, eps)
    return profile_from_sums(sums, *top_activating(z, sample_index, top_k))
