"""Streaming sparsity / dead-dimension metrics (NCL paper, Wang et al., ICLR 2024)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torchmetrics import Metric

from ncl_lightning.foundation.validation import check_at_least, check_shape
from ncl_lightning.metrics.base import FeatureMetric
from ncl_lightning.metrics.functional.sparsity import activation_mask, zero_fraction


class Sparsity(Metric):
    """Mean per-sample fraction of entries with ``|ẑ| <= eps``; see ``functional.sparsity``.

    Args:
        eps: Threshold on the row-normalised magnitude (>= 0).
        normalize: Threshold ``|ẑ|`` (True) or the raw ``|z|`` (False: with ``eps=1e-2``,
            the NCL release's ``main_eval.py`` sparsity).

    Update:
        ``z``: features ``[N, d]``.
    """

    # The NCL paper reads higher sparsity as more interpretable (Sec. 5, Fig. 3).
    higher_is_better = True
    is_differentiable = False
    full_state_update = False

    zero_fraction_sum: Tensor
    num_samples: Tensor

    def __init__(self, eps: float = 1e-5, normalize: bool = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        check_at_least("eps", eps, 0.0)
        self.eps = eps
        self.normalize = normalize
        self.add_state("zero_fraction_sum", torch.tensor(0.0), dist_reduce_fx="sum")
        self.add_state("num_samples", torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")

    def update(self, z: Tensor) -> None:
        """Accumulate a batch of features ``[N, d]``."""
        fractions = zero_fraction(z.detach(), self.eps, self.normalize)
        self.zero_fraction_sum += fractions.sum().to(self.zero_fraction_sum.dtype)
        self.num_samples += fractions.numel()

    def compute(self) -> Tensor:
        """Sparsity in ``[0, 1]`` (NaN before any sample)."""
        return self.zero_fraction_sum / self.num_samples


class ActiveDimensions(FeatureMetric):
    """Number (or fraction) of dimensions with ``|ẑ| > eps`` on at least one sample.

    Keeps a per-dimension activation count ``[num_features]`` (reduced by sum), so dead
    dimensions can also be read from ``activation_count``.

    Args:
        num_features: Feature dimension ``d`` (>= 1).
        eps: Threshold on the row-normalised magnitude (>= 0).
        normalize: Return the activation rate ``active / d`` instead of the count.

    Update:
        ``z``: features ``[N, num_features]``.
    """

    higher_is_better = True

    activation_count: Tensor

    def __init__(
        self, num_features: int, eps: float = 1e-5, normalize: bool = False, **kwargs: Any
    ) -> None:
        super().__init__(num_features, eps, **kwargs)
        self.normalize = normalize
        self.add_sum_state("activation_count", num_features, dtype=torch.long)

    def update(self, z: Tensor) -> None:
        """Accumulate a batch of features ``[N, num_features]``."""
        check_shape("z", z, ("N", self.num_features))
        self.activation_count += activation_mask(z.detach(), self.eps).sum(dim=0)

    def compute(self) -> Tensor:
        """Active-dimension count (int64), or rate in ``[0, 1]`` with ``normalize``."""
        active = (self.activation_count > 0).sum()
        return active.float() / self.num_features if self.normalize else active
