"""Callbacks: interpretability metrics and feature pictures during training and test,
the OOD results table of evaluation runs, the validation of the final weights and the
W&B per-dimension tables."""

from ncl_lightning.callbacks.disentanglement import Disentanglement
from ncl_lightning.callbacks.feature_statistics import (
    FeatureMetricSet,
    FeatureStatistics,
    default_feature_statistics,
)
from ncl_lightning.callbacks.final_validation import FinalValidation
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
    "FinalValidation",
    "OODReport",
    "TopActivations",
    "WarmStart",
    "default_feature_statistics",
    "ood_table",
]
