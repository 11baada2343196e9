"""Functional metrics: the maths behind the ``torchmetrics`` classes of ``metrics``."""

from ncl_lightning.metrics.functional.knn import weighted_knn_predict
from ncl_lightning.metrics.functional.sparsity import (
    activation_mask,
    activation_rate,
    active_dimensions,
    l2_normalize_rows,
    sparsity,
    zero_fraction,
)

__all__ = [
    "activation_mask",
    "activation_rate",
    "active_dimensions",
    "l2_normalize_rows",
    "sparsity",
    "weighted_knn_predict",
    "zero_fraction",
]
