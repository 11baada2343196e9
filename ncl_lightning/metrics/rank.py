"""Streaming effective rank (Roy & Vetterli, 2007; used in NCL, Wang et al., ICLR 2024).

Keeps the Gram matrix ``S = Σ_x ẑ(x) ẑ(x)ᵀ`` (float64, reduced by sum); the singular values
of the stacked features are ``sqrt(eig(S))``, so memory is ``O(d²)`` for any ``N``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torchmetrics import Metric

from ncl_lightning.foundation.validation import check_int, check_shape
from ncl_lightning.metrics.functional.orthogonality import feature_gram
from ncl_lightning.metrics.functional.rank import (
    effective_rank_from_gram,
    spectral_entropy_from_gram,
)


class EffectiveRank(Metric):
    """Effective rank ``exp(H(s / Σ s))`` of ``ẑ``; see ``functional.effective_rank``.

    Args:
        num_features: Feature dimension ``d`` (>= 1).

    Update:
        ``z``: features ``[N, num_features]``.
    """

    # More effective dimensions = less dimensional collapse.
    higher_is_better = True
    is_differentiable = False
    full_state_update = False

    gram: Tensor

    def __init__(self, num_features: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        check_int("num_features", num_features)
        self.num_features = num_features
        d = num_features
        self.add_state("gram", torch.zeros(d, d, dtype=torch.float64), dist_reduce_fx="sum")

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
    ``functional.spectral_entropy``. It keeps the same state as
    [`EffectiveRank`][ncl_lightning.metrics.EffectiveRank].

    Args:
        num_features: Feature dimension ``d`` (>= 1).

    Update:
        ``z``: features ``[N, num_features]``.
    """

    def compute(self) -> Tensor:
        """Spectral entropy in ``[0, ln d]`` (0 before any non-zero sample)."""
        return spectral_entropy_from_gram(self.gram)
