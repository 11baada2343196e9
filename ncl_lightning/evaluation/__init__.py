"""Offline evaluation protocols on pretrained checkpoints: linear probe, fine-tuning,
weighted kNN and expected-activation feature selection (each a LightningModule run by
``ncl-cli`` with a config under ``configs/eval/``)."""

from ncl_lightning.evaluation.features import extract_features, fit_linear_probe, probe_accuracy
from ncl_lightning.evaluation.knn import KNNClassifier
from ncl_lightning.evaluation.linear import FineTune, LinearProbe
from ncl_lightning.evaluation.selection import FeatureSelection, default_ks, selection_table

__all__ = [
    "FeatureSelection",
    "FineTune",
    "KNNClassifier",
    "LinearProbe",
    "default_ks",
    "extract_features",
    "fit_linear_probe",
    "probe_accuracy",
    "selection_table",
]
