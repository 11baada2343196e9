"""Retrieval precision@k with optional expected-activation feature selection.

Reference: Wang et al., "Non-negative Contrastive Learning" (NCL), ICLR 2024, Table 1
("mAP@10" on the top-EA dims). Retrieval compares every pair of samples, so unlike the
other metrics this one stores the features (``O(N d)``; list states reduced by "cat").
"""

from __future__ import annotations

from typing import Any

from torch import Tensor
from torchmetrics import Metric
from torchmetrics.utilities.data import dim_zero_cat

from ncl_lightning.foundation.errors import EmptyMetricError
from ncl_lightning.foundation.validation import check_choice, check_int, check_shape
from ncl_lightning.metrics.functional.activation import (
    expected_activation,
    select_by_expected_activation,
)
from ncl_lightning.metrics.functional.retrieval import (
    RETRIEVAL_DISTANCES,
    RetrievalDistance,
    retrieval_precision,
)


class RetrievalPrecision(Metric):
    """Precision@k of cosine retrieval (each sample queries all others).

    See ``functional.retrieval_precision``. With ``num_selected``, only the
    ``num_selected`` dimensions of largest expected activation *of the stored features*
    are kept before re-normalising.

    Args:
        k: Number of neighbours (>= 1).
        num_selected: Number of dims kept by expected activation (None: all dims).
        chunk_size: Queries per similarity chunk (>= 1).
        distance: ``"cosine"`` (ours) or ``"euclidean"`` (the NCL release's ``main_eval.py``:
            the kept dims of the row-normalised features, not re-normalised).

    Update:
        ``z``: features ``[N, d]``; ``labels``: integer labels ``[N]``.
    """

    higher_is_better = True
    is_differentiable = False
    full_state_update = False

    features: list[Tensor]
    labels: list[Tensor]

    def __init__(
        self,
        k: int = 10,
        num_selected: int | None = None,
        chunk_size: int = 1024,
        distance: RetrievalDistance = "cosine",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        check_int("k", k)
        if num_selected is not None:
            check_int("num_selected", num_selected)
        check_int("chunk_size", chunk_size)
        check_choice("distance", distance, RETRIEVAL_DISTANCES)
        self.distance: RetrievalDistance = distance
        self.k = k
        self.num_selected = num_selected
        self.chunk_size = chunk_size
        self.add_state("features", [], dist_reduce_fx="cat")
        self.add_state("labels", [], dist_reduce_fx="cat")

    def update(self, z: Tensor, labels: Tensor) -> None:
        """Store a batch of features ``[N, d]`` and labels ``[N]``."""
        check_shape("z", z, ("N", "d"))
        check_shape("labels", labels, (z.shape[0],))
        self.features.append(z.detach())
        self.labels.append(labels.detach().long())

    def compute(self) -> Tensor:
        """Precision@k in ``[0, 1]`` over all stored samples."""
        return self.precision(self.distance)

    def precision(self, distance: RetrievalDistance) -> Tensor:
        """Precision@k of the states as they are (this rank's, or synchronised inside
        ``sync_context()``) with either distance, from the one stored copy of the features.

        Args:
            distance: ``"cosine"`` or ``"euclidean"``.

        Returns:
            Scalar float32 tensor in ``[0, 1]``.
        """
        if isinstance(self.features, list) and not self.features:
            raise EmptyMetricError("RetrievalPrecision.compute() called before any update")
        z = dim_zero_cat(self.features)
        labels = dim_zero_cat(self.labels)
        dims = None
        if self.num_selected is not None:
            dims = select_by_expected_activation(expected_activation(z), self.num_selected)
        return retrieval_precision(
            z, labels, self.k, dims=dims, chunk_size=self.chunk_size, distance=distance
        )
