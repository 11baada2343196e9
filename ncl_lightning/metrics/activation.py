"""Streaming expected activation (NCL paper, Wang et al., ICLR 2024, Sec. 6.1)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ncl_lightning.foundation.validation import check_shape
from ncl_lightning.metrics.base import FeatureMetric
from ncl_lightning.metrics.functional.sparsity import l2_normalize_rows


class ExpectedActivation(FeatureMetric):
    """Per-dimension expected activation ``EA_i = mean_x ẑ_i(x)``.

    See ``functional.expected_activation``; rank dims for feature selection with
    ``functional.select_by_expected_activation(metric.compute(), k)``.

    Args:
        num_features: Feature dimension ``d`` (>= 1).

    Update:
        ``z``: features ``[N, num_features]``.
    """

    # A per-dimension vector, not a score.
    higher_is_better = None

    activation_sum: Tensor
    num_samples: Tensor

    def __init__(self, num_features: int, **kwargs: Any) -> None:
        super().__init__(num_features, **kwargs)
        self.add_sum_state("activation_sum", num_features)
        self.add_sum_state("num_samples", dtype=torch.long)

    def update(self, z: Tensor) -> None:
        """Accumulate a batch of features ``[N, num_features]``."""
        check_shape("z", z, ("N", self.num_features))
        self.activation_sum += l2_normalize_rows(z.detach()).sum(dim=0).to(torch.float64)
        self.num_samples += z.shape[0]

    def compute(self) -> Tensor:
        """Expected activation ``[num_features]`` (float32; NaN before any sample)."""
        return (self.activation_sum / self.num_samples).float()
