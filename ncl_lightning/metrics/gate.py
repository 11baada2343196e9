"""Streaming per-dimension open frequency of a gate (BayesNCL, ICML 2026)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ncl_lightning.foundation.validation import check_shape
from ncl_lightning.metrics.base import FeatureMetric
from ncl_lightning.metrics.functional.gate import open_frequency, open_frequency_summary


class OpenFrequency(FeatureMetric):
    """How often each dimension's gate is open; ``compute`` returns summary scalars.

    Args:
        num_features: Gate width ``d``.

    Update:
        ``mask``: gate ``[N, d]`` (0/1 at inference).
    """

    higher_is_better = None

    open_count: Tensor
    num_samples: Tensor

    def __init__(self, num_features: int, **kwargs: Any) -> None:
        super().__init__(num_features, **kwargs)
        self.add_sum_state("open_count", num_features)
        self.add_sum_state("num_samples", dtype=torch.long)

    def update(self, mask: Tensor) -> None:
        """Add a batch of masks ``[N, d]``."""
        check_shape("mask", mask, ("N", self.num_features))
        self.open_count += open_frequency(mask.detach()).double() * mask.shape[0]
        self.num_samples += mask.shape[0]

    def frequency(self) -> Tensor:
        """Per-dimension open frequency ``[d]`` of the samples seen (this rank's until synced)."""
        return (self.open_count / self.num_samples).float()

    def compute(self) -> dict[str, Tensor]:
        """``open_rate``, ``open_freq_{min,median,max}`` and ``never_open_dims``."""
        return open_frequency_summary(self.frequency())
