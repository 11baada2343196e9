"""Streaming Mutual Information Gap (Chen et al., NeurIPS 2018); maths in ``functional.mig``.

The equal-width bins of each code dimension span that dimension's *global* min and max,
which are only known once every sample has been seen, so the metric keeps all codes and
factors (list states, reduced across ranks by "cat") and bins them in ``compute``. MIG is
evaluated on a bounded sample (e.g. 10,000 dSprites images), so the memory stays small.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor
from torchmetrics import Metric
from torchmetrics.utilities import dim_zero_cat

from ncl_lightning.foundation.errors import EmptyMetricError
from ncl_lightning.foundation.validation import check_int
from ncl_lightning.metrics.functional.mig import check_codes_factors, mutual_information_gap


class MutualInformationGap(Metric):
    """MIG of codes against ground-truth factors; see ``functional.mutual_information_gap``.

    Args:
        num_bins: Equal-width bins per code dimension (>= 1).

    Update:
        ``codes``: real codes ``[N, d]``; ``factors``: integer factor labels ``[N, K]``.
    """

    higher_is_better = True
    is_differentiable = False
    full_state_update = False

    codes: list[Tensor]
    factors: list[Tensor]

    def __init__(self, num_bins: int = 20, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        check_int("num_bins", num_bins)
        self.num_bins = num_bins
        # Global min/max binning needs every sample: keep them all ("cat" across ranks).
        self.add_state("codes", [], dist_reduce_fx="cat")
        self.add_state("factors", [], dist_reduce_fx="cat")

    def update(self, codes: Tensor, factors: Tensor) -> None:
        """Store codes ``[N, d]`` with their integer factors ``[N, K]``."""
        check_codes_factors(codes, factors)
        self.codes.append(codes.detach())
        self.factors.append(factors.long())

    def compute(self) -> Tensor:
        """Scalar float64 MIG in ``[0, 1]`` over all stored samples."""
        if isinstance(self.codes, list) and not self.codes:  # a Tensor once synced (DDP)
            raise EmptyMetricError("MutualInformationGap.compute called before any update")
        codes, factors = dim_zero_cat(self.codes), dim_zero_cat(self.factors)
        return mutual_information_gap(codes, factors, self.num_bins)
