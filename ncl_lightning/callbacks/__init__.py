"""Callbacks: interpretability metrics and feature pictures during training and test,
and the OOD results table of evaluation runs."""

from ncl_lightning.callbacks.feature_statistics import FeatureMetricSet, FeatureStatistics
from ncl_lightning.callbacks.ood_report import OODReport, ood_table
from ncl_lightning.callbacks.top_activations import TopActivations

__all__ = ["FeatureMetricSet", "FeatureStatistics", "OODReport", "TopActivations", "ood_table"]
