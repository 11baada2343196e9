"""Interpretability metrics as ``torchmetrics.Metric`` classes; maths in ``functional``."""

from ncl_lightning.metrics import functional
from ncl_lightning.metrics.activation import ExpectedActivation
from ncl_lightning.metrics.dictionary import DictionaryRecovery
from ncl_lightning.metrics.gate import OpenFrequency
from ncl_lightning.metrics.mig import MutualInformationGap
from ncl_lightning.metrics.orthogonality import OrthogonalityError
from ncl_lightning.metrics.profile import FeatureProfile
from ncl_lightning.metrics.rank import EffectiveRank, SpectralEntropy
from ncl_lightning.metrics.retrieval import RetrievalPrecision
from ncl_lightning.metrics.semantic import (
    SemanticConsistency,
    SemanticEntropy,
    TopKSemanticConsistency,
)
from ncl_lightning.metrics.sepin import SEPIN
from ncl_lightning.metrics.sparsity import ActiveDimensions, Sparsity

__all__ = [
    "SEPIN",
    "ActiveDimensions",
    "DictionaryRecovery",
    "EffectiveRank",
    "ExpectedActivation",
    "FeatureProfile",
    "MutualInformationGap",
    "OpenFrequency",
    "OrthogonalityError",
    "RetrievalPrecision",
    "SemanticConsistency",
    "SemanticEntropy",
    "Sparsity",
    "SpectralEntropy",
    "TopKSemanticConsistency",
    "functional",
]
