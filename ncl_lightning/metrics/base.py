"""The base of the streaming metrics of features ``[N, num_features]``."""

from __future__ import annotations

from typing import Any

import torch
from torchmetrics import Metric

from ncl_lightning.foundation.validation import check_at_least, check_int


class FeatureMetric(Metric):
    """A metric of features ``[N, num_features]`` whose states are sums (or top-k slots)
    over samples, so it streams over batches and reduces across ranks.

    Args:
        num_features: Feature dimension ``d`` (>= 1).
        eps: Threshold on the row-normalised magnitude for "activated" (>= 0); ``None``
            for a metric without one.
    """

    is_differentiable = False
    full_state_update = False

    def __init__(self, num_features: int, eps: float | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        check_int("num_features", num_features)
        self.num_features = num_features
        if eps is not None:
            check_at_least("eps", eps, 0.0)
            self.eps = eps

    def add_sum_state(self, name: str, *shape: int, dtype: torch.dtype = torch.float64) -> None:
        """A state of zeros ``shape`` reduced across ranks by sum."""
        self.add_state(name, torch.zeros(shape, dtype=dtype), dist_reduce_fx="sum")
