"""Building blocks: backbones, projector heads, non-negative maps, cross-rank gathering."""

from ncl_lightning.nn.backbones import ResNet, SmallCNN
from ncl_lightning.nn.external import TimmBackbone, TorchvisionBackbone
from ncl_lightning.nn.heads import MLP, LinearClassifier
from ncl_lightning.nn.nonneg import NONNEG, Exp, ReLU, RepReLU, Sigmoid, Softplus, rep_relu
from ncl_lightning.nn.sparse_coding import SparseCodingEncoder, ThresholdActivation
from ncl_lightning.nn.sprite_encoder import SpriteEncoder

# Encoders a config can name as ``backbone`` (listed by ncl-cli when a name is unknown).
BACKBONE_CLASSES = (
    ResNet, SmallCNN, SpriteEncoder, SparseCodingEncoder, TimmBackbone, TorchvisionBackbone,
)  # fmt: skip

__all__ = [
    "BACKBONE_CLASSES",
    "MLP",
    "NONNEG",
    "Exp",
    "LinearClassifier",
    "ReLU",
    "RepReLU",
    "ResNet",
    "Sigmoid",
    "SmallCNN",
    "Softplus",
    "SparseCodingEncoder",
    "SpriteEncoder",
    "ThresholdActivation",
    "TimmBackbone",
    "TorchvisionBackbone",
    "rep_relu",
]
