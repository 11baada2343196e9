"""Streaming effective rank (Roy & Vetterli, 2007; used in NCL, Wang et al., ICLR 2024)
from the summed Gram matrix ``S = Σ_x ẑ(x) ẑ(x)ᵀ``: ``O(d²)`` memory for any ``N``."""

from __future__ import annotations

from typing import Any

from torch import Tensor

from ncl_lightning.foundation.validation import check_shape
from ncl_lightning.metrics.base import FeatureMetric
from ncl_lightning.metrics.functional.orthogonality import feature_gram
from ncl_lightning.metrics.functional.rank import (
    effective_rank_from_gram,
    spectral_entropy_from_gram,
)


class EffectiveRank(FeatureMetric):
    """Effective rank ``exp(H(s / Σ s))`` of ``ẑ``; see ``functional.effective_rank``.

    Args:
        num_features: Feature dimension ``d`` (>= 1).

    Update:
        ``z``: features ``[N, num_features]``.
    """

    # More effective dimensions = less dimensional collapse.
    higher_is_better = True

    gram: Tensor

    def __init__(self, num_features: int, **kwargs: Any) -> None:
        super().__init__(num_features, **kwargs)
        self.add_sum_state("gram", num_features, num_features)

    def update(self, z: Tensor) -> None:
        """Accumulate a batch of features ``[N, num_features]``."""
        check_shape("z", z, ("N", self.num_features))
        self.gram += feature_gram(z.detach()).to(self.gram.dtype)

    def compute(self) -> Tensor:
        """Effective rank in ``[1, d]`` (0 before any non-zero sample)."""
        return effective_rank_from_gram(self.gram)


class SpectralEntropy(EffectiveRank):
    """Spectral entropy ``H(s / Σ s)`` of ``ẑ`` in nats, ``ln`` of the effective rank.

    The quantity the NCL and BayesNCL releases log under the name ``effective_rank``; see
    ``functional.spectral_entropy``. Arguments, updates and state are
    [`EffectiveRank`][ncl_lightning.metrics.EffectiveRank]'s.
    """

    def compute(self) -> Tensor:
        """Spectral entropy in ``[0, ln d]`` (0 before any non-zero sample)."""
        return spectral_entropy_from_gram(self.gram)
