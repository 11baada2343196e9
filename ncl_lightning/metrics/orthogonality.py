"""Streaming orthogonality error (NCL paper, Wang et al., ICLR 2024, Sec. 5).

Keeps the Gram matrix ``S = Σ_x ẑ(x) ẑ(x)ᵀ`` and a per-dimension activation count, both
reduced by sum, so DDP gives the same value as one process on all data; memory is
``O(d²)``, independent of the number of samples.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torchmetrics import Metric

from ncl_lightning.foundation.validation import check_at_least, check_choice, check_int, check_shape
from ncl_lightning.metrics.functional.orthogonality import (
    ORTHOGONALITY_REDUCTIONS,
    OrthogonalityReduction,
    feature_gram,
    orthogonality_error_from_gram,
)
from ncl_lightning.metrics.functional.sparsity import activation_mask


class OrthogonalityError(Metric):
    """Mean ``|cos|`` between active feature columns; see ``functional.orthogonality_error``.

    The column-normalised Gram matrix is derived at compute time as
    ``G_ij = S_ij / sqrt(S_ii S_jj)`` from the summed ``S = ẑᵀẑ`` (float64).

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
    is_differentiable = False
    full_state_update = False

    gram: Tensor
    activation_count: Tensor

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        reduction: OrthogonalityReduction = "off_diagonal",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        check_int("num_features", num_features)
        check_at_least("eps", eps, 0.0)
        check_choice("reduction", reduction, ORTHOGONALITY_REDUCTIONS)
        self.num_features = num_features
        self.eps = eps
        self.reduction: OrthogonalityReduction = reduction
        d = num_features
        self.add_state("gram", torch.zeros(d, d, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("activation_count", torch.zeros(d, dtype=torch.long), dist_reduce_fx="sum")

    def update(self, z: Tensor) -> None:
        """Accumulate a batch of features ``[N, num_features]``."""
        check_shape("z", z, ("N", self.num_features))
        z = z.detach()
        self.gram += feature_gram(z).to(self.gram.dtype)
        self.activation_count += activation_mask(z, self.eps).sum(dim=0)

    def compute(self) -> Tensor:
        """Orthogonality error in ``[0, 1]`` (0 with fewer than 2 active dims)."""
        return orthogonality_error_from_gram(self.gram, self.activation_count > 0, self.reduction)
