"""Self-supervised methods (LightningModules)."""

from ncl_lightning.methods.base import Encoded, SSLMethod
from ncl_lightning.methods.bayesncl import BayesNCL, GatedEncoded
from ncl_lightning.methods.cl import CL
from ncl_lightning.methods.ncl import NCL, NCLTopK

__all__ = ["CL", "NCL", "BayesNCL", "Encoded", "GatedEncoded", "NCLTopK", "SSLMethod"]
