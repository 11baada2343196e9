"""ncl_lightning: interpretable self-supervised learning with PyTorch Lightning."""

from ncl_lightning.runtime.checkpoint import CheckpointError, load_backbone, load_method

__version__ = "0.1.0"

__all__ = ["CheckpointError", "__version__", "load_backbone", "load_method"]
