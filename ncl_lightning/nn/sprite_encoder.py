"""The convolutional encoder of Burgess et al. (2018) for 64x64 sprites (dSprites).

Burgess, Higgins, Pal, Matthey, Watters, Desjardins, Lerchner, "Understanding
disentangling in β-VAE" (2018), Appendix A.1; the same encoder is disentanglement_lib's
``conv_encoder`` (Locatello et al., ICML 2019). Four 4x4 stride-2 convolutions halve the
resolution down to 4x4 and the feature map is *flattened*, not pooled: a globally pooled
CNN ([`SmallCNN`][ncl_lightning.nn.SmallCNN]) is translation invariant away from the image
border, so it cannot represent the posX / posY factors that MIG measures.
"""

from __future__ import annotations

from torch import Tensor, nn

from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.foundation.validation import check_int
from ncl_lightning.nn.backbones import backbone_spec
from ncl_lightning.nn.protocols import Backbone


class SpriteEncoder(nn.Module, Backbone):
    """Four 4x4 stride-2 conv + ReLU layers, flatten, two linear layers with ReLU.

    ``[B, C, 64, 64] -> 32² -> 16² -> 8² -> 4²`` feature maps with ``width`` channels,
    then ``Linear(16 width, hidden_dim)``, ReLU, ``Linear(hidden_dim, out_dim)``, ReLU.

    Args:
        in_channels: Number of input channels (>= 1).
        width: Channels of every conv layer (Burgess et al.: 32; >= 1).
        hidden_dim: Width of the hidden linear layer (Burgess et al.: 256; >= 1).
        out_dim: Representation size (>= 1).
        image_size: Input side ``H = W``, a multiple of 16 (>= 16).

    Attributes:
        out_dim: Representation size.
        spec: ``{"class_path", "init_args"}`` rebuilding this architecture.

    Shapes:
        ``x``: ``[B, in_channels, image_size, image_size]`` -> ``[B, out_dim]`` (>= 0).
    """

    def __init__(
        self,
        in_channels: int = 1,
        width: int = 32,
        hidden_dim: int = 256,
        out_dim: int = 256,
        image_size: int = 64,
    ) -> None:
        super().__init__()
        for name, value in (("in_channels", in_channels), ("width", width),
                            ("hidden_dim", hidden_dim), ("out_dim", out_dim)):  # fmt: skip
            check_int(name, value)
        if image_size < 16 or image_size % 16:
            raise ConfigError(
                f"SpriteEncoder image_size must be a multiple of 16, got {image_size}",
                key="image_size",
            )
        self.out_dim = out_dim
        self.spec = backbone_spec(
            SpriteEncoder, in_channels=in_channels, width=width, hidden_dim=hidden_dim,
            out_dim=out_dim, image_size=image_size,
        )  # fmt: skip
        convs: list[nn.Module] = []
        for c_in in (in_channels, width, width, width):
            convs += [nn.Conv2d(c_in, width, kernel_size=4, stride=2, padding=1), nn.ReLU()]
        side = image_size // 16
        self.features = nn.Sequential(*convs, nn.Flatten())
        self.fc = nn.Sequential(
            nn.Linear(width * side * side, hidden_dim),
            nn.ReLU(),
            nn.Linear(hidden_dim, out_dim),
            nn.ReLU(),
        )

    def forward(self, x: Tensor) -> Tensor:
        """Encode images ``[B, C, H, W]`` to features ``[B, out_dim]``."""
        return self.fc(self.features(x))
