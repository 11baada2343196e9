"""Streaming orthogonality error (NCL paper, Wang et al., ICLR 2024, Sec. 5) in ``O(d²)``
memory, independent of the number of samples."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ncl_lightning.foundation.validation import check_choice, check_shape
from ncl_lightning.metrics.base import FeatureMetric
from ncl_lightning.metrics.functional.orthogonality import (
    ORTHOGONALITY_REDUCTIONS,
    OrthogonalityReduction,
    feature_gram,
    orthogonality_error_from_gram,
)
from ncl_lightning.metrics.functional.sparsity import activation_mask


class OrthogonalityError(FeatureMetric):
    """Mean ``|cos|`` between active feature columns; see ``functional.orthogonality_error``.

    Args:
        num_features: Feature dimension ``d`` (>= 1).
        eps: Threshold on the row-normalised magnitude for "activated" (>= 0).
        reduction: ``"off_diagonal"`` (ours) or a release's ``"mean_all_entries"`` /
            ``"median_all_entries"``; both come from the same states.

    Update:
        ``z``: features ``[N, num_features]``.
    """

    # 0 = orthogonal dimensions, the NCL ideal.
    higher_is_better = False

    gram: Tensor
    activation_count: Tensor

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        reduction: OrthogonalityReduction = "off_diagonal",
        **kwargs: Any,
    ) -> None:
        super().__init__(num_features, eps, **kwargs)
        check_choice("reduction", reduction, ORTHOGONALITY_REDUCTIONS)
        self.reduction: OrthogonalityReduction = reduction
        self.add_sum_state("gram", num_features, num_features)
        self.add_sum_state("activation_count", num_features, dtype=torch.long)

    def update(self, z: Tensor) -> None:
        """Accumulate a batch of features ``[N, num_features]``."""
        check_shape("z", z, ("N", self.num_features))
        z = z.detach()
        self.gram += feature_gram(z).to(self.gram.dtype)
        self.activation_count += activation_mask(z, self.eps).sum(dim=0)

    def compute(self) -> Tensor:
        """Orthogonality error in ``[0, 1]`` (0 with fewer than 2 active dims)."""
        return orthogonality_error_from_gram(self.gram, self.activation_count > 0, self.reduction)
