"""Streaming per-dimension profile of features (the data of a feature atlas)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ncl_lightning.foundation.validation import check_int, check_shape
from ncl_lightning.metrics.base import FeatureMetric
from ncl_lightning.metrics.functional.profile import (
    EMPTY_INDEX,
    DimensionProfile,
    ProfileSums,
    merge_top_k,
    profile_from_sums,
    profile_sums,
    top_activating,
)


class FeatureProfile(FeatureMetric):
    """EA, activation frequency, class counts and top-``k`` samples of every dimension.

    The sums reduce over ranks by addition and the top-``k`` slots by concatenation and a
    new top-``k`` (ties to the smaller sample index), so ``compute`` gives under DDP what one
    process gives on the whole split. Memory is ``O(d · (C + k))`` whatever the split size.
    See [`dimension_profile`][ncl_lightning.metrics.functional.profile.dimension_profile].

    Args:
        num_features: Feature width ``d``.
        num_classes: Number of classes ``C`` (>= 1).
        eps: Activation threshold on ``|ẑ|``.
        top_k: Samples kept per dimension.

    Update:
        ``z``: features ``[B, d]``; ``labels``: ``[B]`` in ``[0, C)``; ``sample_index``:
        dataset index of each row ``[B]``, unique across updates and ranks.

    Compute:
        ``DimensionProfile``.
    """

    higher_is_better = None
    # ``forward`` then updates the accumulated state itself (whose top-k slots ``update``
    # merges back to k) instead of concatenating a batch state onto it: memory stays bounded.
    full_state_update = True

    num_samples: Tensor
    ea_sum: Tensor
    class_counts: Tensor
    class_mass: Tensor
    top_values: Tensor
    top_index: Tensor

    def __init__(
        self, num_features: int, num_classes: int, eps: float = 1e-5, top_k: int = 16, **kwargs: Any
    ) -> None:
        super().__init__(num_features, eps, **kwargs)
        check_int("num_classes", num_classes)
        check_int("top_k", top_k)
        self.num_classes, self.top_k = num_classes, top_k
        d, c = num_features, num_classes
        self.add_sum_state("num_samples", dtype=torch.long)
        self.add_sum_state("ea_sum", d)
        self.add_sum_state("class_counts", d, c, dtype=torch.long)
        self.add_sum_state("class_mass", d, c)
        self.add_state("top_values", torch.full((top_k, d), -torch.inf), dist_reduce_fx="cat")
        self.add_state(
            "top_index", torch.full((top_k, d), EMPTY_INDEX, dtype=torch.long), dist_reduce_fx="cat"
        )

    def update(self, z: Tensor, labels: Tensor, sample_index: Tensor) -> None:
        """Add a batch: features ``[B, d]``, labels ``[B]``, dataset indices ``[B]``."""
        check_shape("z", z, ("B", self.num_features))
        z = z.detach()
        sums = profile_sums(z, labels, self.num_classes, self.eps)
        self.num_samples += sums.num_samples
        self.ea_sum += sums.ea_sum
        self.class_counts += sums.class_counts
        self.class_mass += sums.class_mass
        values, index = top_activating(z, sample_index, self.top_k)
        self.top_values, self.top_index = merge_top_k(
            torch.cat([self.top_values, values.to(self.top_values.dtype)]),
            torch.cat([self.top_index, index]),
            self.top_k,
        )

    def compute(self) -> DimensionProfile:
        """The profile of every sample seen (on every rank once synced)."""
        sums = ProfileSums(self.num_samples, self.ea_sum, self.class_counts, self.class_mass)
        return profile_from_sums(sums, *merge_top_k(self.top_values, self.top_index, self.top_k))
