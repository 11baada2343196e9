"""Encoders ("backbones") mapping images to representation vectors.

* [`ResNet`][] — torchvision ResNet-18/34/50 (He et al., 2016) without the classifier,
  with the CIFAR stem of SimCLR (Chen et al., 2020, Appendix B.9) for 32x32 images, padded
  as in the NCL and BayesNCL releases (solo-learn).
* [`SmallCNN`][] — a few 3x3 conv layers for tiny images (e.g. 8x8 scikit-learn digits)
  that keeps tests and demos fast on CPU.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import torch
import torchvision
from torch import Tensor, nn

from ncl_lightning.foundation.validation import check_choice, check_int
from ncl_lightning.nn.protocols import Backbone

_RESNETS: dict[int, tuple[Callable[..., torchvision.models.ResNet], int]] = {
    18: (torchvision.models.resnet18, 512),
    34: (torchvision.models.resnet34, 512),
    50: (torchvision.models.resnet50, 2048),
}
# conv1's zero padding when none is given: the releases' CIFAR stem (solo-learn
# ``solo/methods/base.py``: 3x3, stride 1, padding 2), torchvision's 7x7 stem. The one rule
# of the package: ResNet and the timm / torchvision wrappers (nn.external) follow it.
STEM_PADDING = {"cifar": 2, "imagenet": 3}


def backbone_spec(cls: type, **init_args: Any) -> dict[str, Any]:
    """``{"class_path", "init_args"}`` that rebuilds a backbone: written into checkpoints
    so [`ncl_lightning.load_backbone`][] can rebuild a module made from Python."""
    return {"class_path": f"ncl_lightning.nn.{cls.__name__}", "init_args": init_args}


def stem_conv(
    in_channels: int, cifar: bool, padding: int | None = None, out_channels: int = 64
) -> nn.Conv2d:
    """A ResNet ``conv1`` with torchvision's init: 3x3 stride 1 (the CIFAR stem, used
    without max-pool) or 7x7 stride 2 (the ImageNet stem); ``padding`` ``None``: the
    stem's own (``STEM_PADDING``)."""
    kernel, stride = (3, 1) if cifar else (7, 2)
    if padding is None:
        padding = STEM_PADDING["cifar" if cifar else "imagenet"]
    conv = nn.Conv2d(in_channels, out_channels, kernel, stride=stride, padding=padding, bias=False)
    _init_stem(conv)
    return conv


def _init_stem(conv: nn.Conv2d) -> None:
    """The init torchvision uses for every conv."""
    nn.init.kaiming_normal_(conv.weight, mode="fan_out", nonlinearity="relu")


class ResNet(nn.Module, Backbone):
    """Randomly initialised torchvision ResNet with the classifier replaced by ``Identity``.

    The torchvision children are registered directly on this module, so state-dict keys
    match torchvision's (``conv1.weight``, ``layer1.0...``) and ``fc`` is an ``Identity``.

    Args:
        depth: 18, 34 or 50.
        stem: ``"cifar"``: 3x3 stride-1 ``conv1`` and no max-pool (SimCLR's CIFAR variant,
            for 32x32 inputs); ``"imagenet"``: the standard 7x7 stride-2 conv followed by
            3x3 max-pool.
        in_channels: Number of input channels (>= 1).
        zero_init_residual: Zero-init the last BN of each residual branch (Goyal et al., 2017).
        stem_padding: Zero padding of ``conv1`` (an integer >= 0). ``None`` (default): the
            stem's own, 2 for ``cifar`` and 3 for ``imagenet``. The CIFAR stem's padding 2
            is the NCL and BayesNCL releases' (``PKU-ML/non_neg`` and
            ``Cui-Peng-624/BayesNCL``, solo-learn ``solo/methods/base.py``): a 32x32 image
            gives 34x34 maps after ``conv1`` (5x5 after ``layer4``). ``1`` keeps 32x32
            (4x4 after ``layer4``; what this package built before it followed the releases:
            the weights have the same shapes, so pass ``stem_padding: 1`` to evaluate or
            resume such a run as it was trained).

    Attributes:
        out_dim: Representation size (512 for depth 18/34, 2048 for 50).
        spec: ``{"class_path", "init_args"}`` rebuilding this architecture.

    Shapes:
        ``x``: ``[B, in_channels, H, W]`` -> ``[B, out_dim]``.
    """

    def __init__(
        self,
        depth: int = 18,
        stem: Literal["cifar", "imagenet"] = "cifar",
        in_channels: int = 3,
        zero_init_residual: bool = False,
        stem_padding: int | None = None,
    ) -> None:
        super().__init__()
        check_choice("depth", depth, sorted(_RESNETS))
        check_choice("stem", stem, STEM_PADDING)
        check_int("in_channels", in_channels)
        if stem_padding is not None:
            check_int("stem_padding", stem_padding, low=0)
        padding = STEM_PADDING[stem] if stem_padding is None else int(stem_padding)
        factory, self.out_dim = _RESNETS[depth]
        # The padding resolved: a checkpoint rebuilds what it was trained with.
        self.spec = backbone_spec(
            ResNet, depth=depth, stem=stem, in_channels=in_channels,
            zero_init_residual=zero_init_residual, stem_padding=padding,
        )  # fmt: skip
        # weights=None: random init, never a download.
        net = factory(weights=None, zero_init_residual=zero_init_residual)
        if stem == "cifar" or in_channels != 3 or padding != 3:
            net.conv1 = stem_conv(in_channels, stem == "cifar", padding)
        else:  # torchvision's own conv1, re-initialised as every stem is (same RNG draws)
            _init_stem(net.conv1)
        if stem == "cifar":
            net.maxpool = nn.Identity()
        net.fc = nn.Identity()
        for name, child in net.named_children():
            self.add_module(name, child)

    def forward(self, x: Tensor) -> Tensor:
        """Encode images ``[B, C, H, W]`` to features ``[B, out_dim]``."""
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def _conv_bn_relu(c_in: int, c_out: int, stride: int = 1, batch_norm: bool = True) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(c_in, c_out, kernel_size=3, stride=stride, padding=1, bias=not batch_norm),
        nn.BatchNorm2d(c_out) if batch_norm else nn.Identity(),
        nn.ReLU(inplace=True),
    )


class SmallCNN(nn.Module, Backbone):
    """Four 3x3 conv+BN+ReLU layers, global average pool, linear to ``out_dim``.

    Sized for tiny images (8x8 digits, 28x28 MNIST): one stride-2 layer halves the
    resolution, the rest keep it.

    Args:
        in_channels: Number of input channels (>= 1).
        width: Channels of the first two layers; the last two use ``2 * width`` (>= 1).
        out_dim: Representation size (>= 1).
        batch_norm: BatchNorm after each convolution (without it, each convolution has a
            bias). Without BatchNorm a sample's features do not depend on the rest of its
            batch, so a run on several processes computes exactly what one process does
            on the global batch (BatchNorm normalises per process unless synchronised).

    Attributes:
        out_dim: Representation size.
        spec: ``{"class_path", "init_args"}`` rebuilding this architecture.

    Shapes:
        ``x``: ``[B, in_channels, H, W]`` -> ``[B, out_dim]``.
    """

    def __init__(
        self, in_channels: int = 1, width: int = 32, out_dim: int = 128, batch_norm: bool = True
    ) -> None:
        super().__init__()
        for name, value in (("in_channels", in_channels), ("width", width), ("out_dim", out_dim)):
            check_int(name, value)
        self.out_dim = out_dim
        self.spec = backbone_spec(
            SmallCNN, in_channels=in_channels, width=width, out_dim=out_dim, batch_norm=batch_norm
        )
        norm = batch_norm
        self.features = nn.Sequential(
            _conv_bn_relu(in_channels, width, batch_norm=norm),
            _conv_bn_relu(width, width, batch_norm=norm),
            _conv_bn_relu(width, 2 * width, stride=2, batch_norm=norm),
            _conv_bn_relu(2 * width, 2 * width, batch_norm=norm),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
        )
        self.fc = nn.Linear(2 * width, out_dim)

    def forward(self, x: Tensor) -> Tensor:
        """Encode images ``[B, C, H, W]`` to features ``[B, out_dim]``."""
        return self.fc(self.features(x))


def resnet18(
    stem: Literal["cifar", "imagenet"] = "cifar",
    in_channels: int = 3,
    zero_init_residual: bool = False,
    stem_padding: int | None = None,
) -> ResNet:
    """ResNet-18 backbone (``out_dim`` 512); see [`ResNet`][]."""
    return ResNet(18, stem, in_channels, zero_init_residual, stem_padding)


def resnet34(
    stem: Literal["cifar", "imagenet"] = "cifar",
    in_channels: int = 3,
    zero_init_residual: bool = False,
    stem_padding: int | None = None,
) -> ResNet:
    """ResNet-34 backbone (``out_dim`` 512); see [`ResNet`][]."""
    return ResNet(34, stem, in_channels, zero_init_residual, stem_padding)


def resnet50(
    stem: Literal["cifar", "imagenet"] = "cifar",
    in_channels: int = 3,
    zero_init_residual: bool = False,
    stem_padding: int | None = None,
) -> ResNet:
    """ResNet-50 backbone (``out_dim`` 2048); see [`ResNet`][]."""
    return ResNet(50, stem, in_channels, zero_init_residual, stem_padding)
