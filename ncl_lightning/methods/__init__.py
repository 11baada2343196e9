"""LightningModules: self-supervised methods (CL, NCL, BayesNCL, SimSiam, BYOL) and
supervised classifiers (CE/NCE)."""

from ncl_lightning.methods.bayesncl import BayesNCL, GatedEncoded
from ncl_lightning.methods.byol import BYOL
from ncl_lightning.methods.cl import CL
from ncl_lightning.methods.classifier import Classifier
from ncl_lightning.methods.nce import NCEClassifier
from ncl_lightning.methods.ncl import NCL, NCLTopK
from ncl_lightning.methods.simsiam import SimSiam
from ncl_lightning.methods.ssl import Encoded, SSLMethod
from ncl_lightning.methods.supcon import SupConCL, SupConNCL
from ncl_lightning.methods.trainable import TrainableModule

__all__ = [
    "BYOL",
    "CL",
    "NCL",
    "BayesNCL",
    "Classifier",
    "Encoded",
    "GatedEncoded",
    "NCEClassifier",
    "NCLTopK",
    "SSLMethod",
    "SimSiam",
    "SupConCL",
    "SupConNCL",
    "TrainableModule",
]
