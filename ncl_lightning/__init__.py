"""ncl_lightning: interpretable self-supervised learning with PyTorch Lightning."""

from ncl_lightning.runtime.checkpoint import CheckpointError, load_backbone, load_method
from ncl_lightning.runtime.defaults import default_callbacks

__version__ = "0.1.0"

__all__ = ["CheckpointError", "__version__", "default_callbacks", "load_backbone", "load_method"]
