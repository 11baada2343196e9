"""Streaming SEPIN@k (Do & Tran, ICLR 2020; estimated as in NCL, Wang et al., ICLR 2024, App. G.3).

Each ``update`` gets one batch of paired augmented views and evaluates the per-dimension
SEPIN with that batch's in-batch negatives (as in training); the metric keeps the
sample-weighted sum over batches, so it reduces across ranks with a plain sum.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import islice
from typing import Any

import torch
from torch import Tensor

from ncl_lightning.foundation.validation import check_positive, check_shape
from ncl_lightning.metrics.base import FeatureMetric
from ncl_lightning.metrics.functional.sepin import (
    DEFAULT_KS,
    check_ks,
    sepin_at_k,
    sepin_per_dimension,
)


class SEPIN(FeatureMetric):
    """SEPIN@k: mean of the ``k`` largest per-dimension SEPIN values; see ``functional.sepin``.

    ``SEPIN_i ≈ L_NCE(z₋ᵢ) - L_NCE(z)`` is estimated per batch (the ``B`` pairs of a batch
    are each other's negatives) and averaged over batches weighted by ``B``; SEPIN@k is then
    taken on the averaged ``[d]`` vector. Feed batches of the training size: the InfoNCE
    bound, hence the estimate, depends on ``B``.

    Args:
        num_features: Feature dimension ``d`` (>= 1).
        temperature: Training InfoNCE temperature ``τ > 0``.
        ks: Cut-offs ``k >= 1``; ``None`` means all dimensions, and ``k > d`` uses all ``d``.
        per_dimension: Also return the averaged ``[d]`` vector under ``"per_dimension"``.

    Update:
        ``z1``, ``z2``: the two views' features ``[B, num_features]``, row-paired. An empty
        batch (``B = 0``) adds nothing.

    Compute:
        ``{"sepin@1": ..., "sepin@10": ..., "sepin@100": ..., "sepin@all": ...}`` (one scalar
        per ``k``), and the ``[d]`` vector with ``per_dimension``; NaN before any pair.
    """

    # More information carried by individual dimensions = more disentangled (Do & Tran).
    higher_is_better = True

    sepin_sum: Tensor
    num_pairs: Tensor

    def __init__(
        self,
        num_features: int,
        temperature: float,
        ks: Iterable[int | None] = DEFAULT_KS,
        per_dimension: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(num_features, **kwargs)
        check_positive("temperature", temperature)
        self.temperature = temperature
        self.ks = check_ks(ks)
        self.per_dimension = per_dimension
        self.add_sum_state("sepin_sum", num_features, dtype=torch.float32)
        self.add_sum_state("num_pairs", dtype=torch.long)

    def update(self, z1: Tensor, z2: Tensor) -> None:
        """Accumulate one batch of paired views ``[B, num_features]`` each."""
        check_shape("z1", z1, ("B", self.num_features))
        check_shape("z2", z2, tuple(z1.shape))
        batch = z1.shape[0]
        if batch == 0:
            return
        per_dim = sepin_per_dimension(z1.detach(), z2.detach(), self.temperature)
        self.sepin_sum += batch * per_dim.to(self.sepin_sum.dtype)
        self.num_pairs += batch

    def compute(self) -> dict[str, Tensor]:
        """``{"sepin@k": scalar}`` for each configured ``k`` (``"sepin@all"`` for ``None``)."""
        per_dim = self.sepin_sum / self.num_pairs
        out = sepin_at_k(per_dim, self.ks)
        return out | {"per_dimension": per_dim} if self.per_dimension else out


@torch.no_grad()
def sepin_on_views(
    module: Any,
    loader: Any,
    temperature: float,
    num_features: int,
    most: int | None = None,
    per_dimension: bool = False,
) -> dict[str, Tensor]:
    """SEPIN@k of ``module.encode(x).z`` on the first ``most`` batches of augmented view
    pairs of ``loader`` (this rank's share; the metric reduces over the ranks).

    Args:
        module: A method with ``encode``.
        loader: Batches ``(views, labels)`` (a DataModule's ``view_dataloader``).
        temperature: The training InfoNCE temperature.
        num_features: Width ``d`` of ``z``.
        most: Batches read at most (None: all).
        per_dimension: Also return the ``[d]`` vector (``SEPIN(per_dimension=True)``).
    """
    metric = SEPIN(num_features, temperature, per_dimension=per_dimension).to(module.device)
    for views, _ in islice(loader, most):
        z1, z2 = (module.encode(v.to(module.device)).z.float() for v in views[:2])
        metric.update(z1, z2)
    return metric.compute()
