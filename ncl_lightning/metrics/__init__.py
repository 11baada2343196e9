"""Interpretability metrics as ``torchmetrics.Metric`` classes; maths in ``functional``."""

from ncl_lightning.metrics import functional
from ncl_lightning.metrics.sparsity import ActiveDimensions, Sparsity

__all__ = ["ActiveDimensions", "Sparsity", "functional"]
