"""Self-supervised methods (LightningModules)."""

from ncl_lightning.methods.base import Encoded, SSLMethod
from ncl_lightning.methods.cl import CL
from ncl_lightning.methods.ncl import NCL

__all__ = ["CL", "NCL", "Encoded", "SSLMethod"]
