"""Callbacks: interpretability metrics and feature pictures during training and test,
and the OOD results table of evaluation runs."""

from ncl_lightning.callbacks.disentanglement import Disentanglement
from ncl_lightning.callbacks.feature_statistics import FeatureMetricSet, FeatureStatistics
from ncl_lightning.callbacks.ood_report import OODReport, ood_table
from ncl_lightning.callbacks.sparse_coding import (
    DictionaryRecoveryMonitor,
    EncoderNormalization,
    WarmStart,
)
from ncl_lightning.callbacks.top_activations import TopActivations

__all__ = [
    "DictionaryRecoveryMonitor",
    "Disentanglement",
    "EncoderNormalization",
    "FeatureMetricSet",
    "FeatureStatistics",
    "OODReport",
    "TopActivations",
    "WarmStart",
    "ood_table",
]
