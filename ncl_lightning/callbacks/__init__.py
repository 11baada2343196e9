"""Callbacks: interpretability metrics and feature pictures during training and test."""

from ncl_lightning.callbacks.feature_statistics import FeatureMetricSet, FeatureStatistics
from ncl_lightning.callbacks.top_activations import TopActivations

__all__ = ["FeatureMetricSet", "FeatureStatistics", "TopActivations"]
