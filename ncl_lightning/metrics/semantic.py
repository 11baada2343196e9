"""Streaming semantic consistency (NCL paper, Wang et al., ICLR 2024, Sec. 5) and semantic
entropy H_s (BayesNCL paper, ICML 2026); memory never grows with the number of samples."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ncl_lightning.foundation.validation import check_choice, check_int, check_shape
from ncl_lightning.metrics.base import FeatureMetric
from ncl_lightning.metrics.functional.profile import merge_top_k
from ncl_lightning.metrics.functional.semantic import (
    ENTROPY_WEIGHTINGS,
    EntropyWeighting,
    check_features_labels,
    class_activation_counts,
    class_activation_mass,
    per_class_mean,
    semantic_consistency_from_counts,
    semantic_entropy_from_counts,
    top_k_class_counts,
)
from ncl_lightning.metrics.functional.sparsity import activation_mask, l2_normalize_rows


class _ClassMetric(FeatureMetric):
    """A ``FeatureMetric`` of features with labels in ``[0, num_classes)``."""

    def __init__(self, num_features: int, num_classes: int, eps: float, **kwargs: Any) -> None:
        super().__init__(num_features, eps, **kwargs)
        check_int("num_classes", num_classes)
        self.num_classes = num_classes


class SemanticConsistency(_ClassMetric):
    """Semantic consistency (×100) over activated samples; see ``functional.semantic_consistency``.

    Args:
        num_features: Feature dimension ``d`` (>= 1).
        num_classes: Number of classes ``C`` (>= 1).
        eps: Threshold on the row-normalised magnitude for "activated" (>= 0).

    Update:
        ``z``: features ``[N, num_features]``; ``labels``: integer labels ``[N]``.
    """

    higher_is_better = True

    class_counts: Tensor

    def __init__(
        self, num_features: int, num_classes: int, eps: float = 1e-5, **kwargs: Any
    ) -> None:
        super().__init__(num_features, num_classes, eps, **kwargs)
        self.add_sum_state("class_counts", num_features, num_classes, dtype=torch.long)

    def update(self, z: Tensor, labels: Tensor) -> None:
        """Accumulate features ``[N, num_features]`` with labels ``[N]``."""
        check_shape("z", z, ("N", self.num_features))
        self.class_counts += class_activation_counts(z.detach(), labels, self.num_classes, self.eps)

    def compute(self) -> Tensor:
        """Consistency in ``[100 / C, 100]`` (NaN when no dim is active)."""
        return semantic_consistency_from_counts(self.class_counts)


class TopKSemanticConsistency(_ClassMetric):
    """Top-k semantic consistency (×100): class purity of each dim's ``top_k`` activations.

    Streams the ``top_k`` largest ``ẑ_i`` of every dimension and their labels; the
    result equals ``functional.semantic_consistency(..., top_k=top_k)`` on all data (up
    to the arbitrary order of tied activations). With fewer than ``top_k`` samples all
    samples are used. Active dims (``|ẑ| > eps`` somewhere) are tracked by a count.

    Args:
        num_features: Feature dimension ``d`` (>= 1).
        num_classes: Number of classes ``C`` (>= 1).
        top_k: Samples kept per dimension (>= 1).
        eps: Threshold on the row-normalised magnitude for "active" (>= 0).

    Update:
        ``z``: features ``[N, num_features]``; ``labels``: integer labels ``[N]``.
    """

    higher_is_better = True

    top_values: Tensor
    top_labels: Tensor
    activation_count: Tensor

    def __init__(
        self,
        num_features: int,
        num_classes: int,
        top_k: int = 100,
        eps: float = 1e-5,
        **kwargs: Any,
    ) -> None:
        super().__init__(num_features, num_classes, eps, **kwargs)
        check_int("top_k", top_k)
        self.top_k = top_k
        d = num_features
        # -inf / -1 mark empty slots; "cat" stacks the ranks' states, compute re-selects.
        self.add_state("top_values", torch.full((top_k, d), -torch.inf), dist_reduce_fx="cat")
        self.add_state(
            "top_labels", torch.full((top_k, d), -1, dtype=torch.long), dist_reduce_fx="cat"
        )
        self.add_sum_state("activation_count", d, dtype=torch.long)

    def update(self, z: Tensor, labels: Tensor) -> None:
        """Merge features ``[N, num_features]`` with labels ``[N]`` into the top-k states."""
        check_shape("z", z, ("N", self.num_features))
        labels = check_features_labels(z, labels, self.num_classes, self.eps)
        z = z.detach()
        z_hat = l2_normalize_rows(z).to(self.top_values.dtype)
        batch_labels = labels[:, None].expand(-1, self.num_features)
        self.top_values, self.top_labels = merge_top_k(
            torch.cat([self.top_values, z_hat]),
            torch.cat([self.top_labels, batch_labels]),
            self.top_k,
        )
        self.activation_count += activation_mask(z, self.eps).sum(dim=0)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Batch value as usual; then re-select, since merging the batch "cat"s the states.

        Keeps the states at exactly ``[top_k, d]`` on every rank, which the DDP gather needs.
        """
        value = super().forward(*args, **kwargs)
        self.top_values, self.top_labels = merge_top_k(self.top_values, self.top_labels, self.top_k)
        return value

    def compute(self) -> Tensor:
        """Top-k consistency in ``[100 / C, 100]`` (NaN when no dim is active)."""
        values, labels = merge_top_k(self.top_values, self.top_labels, self.top_k)
        counts = top_k_class_counts(labels, self.num_classes, valid=values > -torch.inf)
        return semantic_consistency_from_counts(counts, self.activation_count > 0)


class SemanticEntropy(_ClassMetric):
    """Semantic entropy ``H_s`` (nats); see ``functional.semantic_entropy``.

    Args:
        num_features: Feature dimension ``d`` (>= 1).
        num_classes: Number of classes ``C`` (>= 1).
        eps: Threshold on the row-normalised magnitude for "activated" (>= 0).
        weighting: ``"activation"`` (the paper's), ``"frequency"`` or
            ``"mean_activation"`` (the BayesNCL release's), as in the functional.

    Update:
        ``z``: features ``[N, num_features]``; ``labels``: integer labels ``[N]``.
    """

    higher_is_better = False

    class_mass: Tensor
    class_counts: Tensor
    class_sizes: Tensor

    def __init__(
        self,
        num_features: int,
        num_classes: int,
        eps: float = 1e-5,
        weighting: EntropyWeighting = "activation",
        **kwargs: Any,
    ) -> None:
        super().__init__(num_features, num_classes, eps, **kwargs)
        check_choice("weighting", weighting, ENTROPY_WEIGHTINGS)
        self.weighting = weighting
        self.add_sum_state("class_mass", num_features, num_classes)
        self.add_sum_state("class_counts", num_features, num_classes, dtype=torch.long)
        self.add_sum_state("class_sizes", num_classes, dtype=torch.long)

    def update(self, z: Tensor, labels: Tensor) -> None:
        """Accumulate features ``[N, num_features]`` with labels ``[N]``."""
        check_shape("z", z, ("N", self.num_features))
        z = z.detach()
        self.class_counts += class_activation_counts(z, labels, self.num_classes, self.eps)
        self.class_mass += class_activation_mass(z, labels, self.num_classes).to(
            self.class_mass.dtype
        )
        self.class_sizes += torch.bincount(labels.long(), minlength=self.num_classes)

    def compute(self) -> Tensor:
        """Semantic entropy in ``[0, ln C]`` (NaN when no dim is active)."""
        active = self.class_counts.sum(dim=1) > 0
        weights = self.class_counts if self.weighting == "frequency" else self.class_mass
        if self.weighting == "mean_activation":
            weights = per_class_mean(self.class_mass, self.class_sizes)
        return semantic_entropy_from_counts(weights, active)
