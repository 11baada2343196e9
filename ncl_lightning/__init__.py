"""ncl_lightning: interpretable self-supervised learning with PyTorch Lightning."""

__version__ = "0.1.0"
