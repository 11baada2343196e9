"""SimCLR's views for dSprites: the NCL paper's setting for its disentanglement study.

The NCL paper (Wang et al., ICLR 2024, App. F.1, Table 6) trains CL and NCL on dSprites
"following the settings of Abdi et al. (2019)", that is with SimCLR's augmentations
(Chen et al., 2020). Unlike [`SpriteAugmentation`][ncl_lightning.data.SpriteAugmentation],
these views *change* ground-truth factors (a crop moves and rescales the sprite, a flip
mirrors position and orientation), so the two views of a pair share the sprite's
identity but not its factor values.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ncl_lightning.data.batch_augmentation import BatchAugmentation
from ncl_lightning.data.transforms import SimCLRAugmentation
from ncl_lightning.data.view_params import sample_view_params
from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.foundation.validation import check_shape

# Chen et al. (2020), App. A, on one channel: SimCLRAugmentation's defaults (crop, flip,
# colour strength 0.8 with p=0.8, blur p=0.5 with σ ~ U(0.1, 2)) without the colour-only
# operations and without normalisation.
_SPRITE_SIMCLR: dict[str, Any] = {
    "saturation": 0.0,
    "hue": 0.0,
    "grayscale_p": 0.0,
    "solarize_p": 0.0,
    "mean": (0.0,),
    "std": (1.0,),
}


def sprite_simclr_augmentation(image_size: int = 64, **overrides: Any) -> SimCLRAugmentation:
    """SimCLR's view recipe for one-channel sprites of side ``image_size``.

    Crop area ``U(0.08, 1)`` of the image, aspect ratio ``(3/4, 4/3)``, resized back to
    ``image_size``; horizontal flip with probability 0.5; brightness and contrast jitter of
    strength 0.8 with probability 0.8; Gaussian blur with probability 0.5 and
    ``σ ~ U(0.1, 2)`` px; values stay in ``[0, 1]`` (mean 0, std 1: no normalisation).

    Args:
        image_size: Side of the sprites and of the views.
        **overrides: Fields of [`SimCLRAugmentation`][ncl_lightning.data.SimCLRAugmentation]
            to change.

    Returns:
        The recipe, ready for [`SimCLRSpriteViews`][] (or ``DSpritesDataModule(augmentation=...)``).
    """
    return SimCLRAugmentation(**{**_SPRITE_SIMCLR, "crop_size": image_size, **overrides})


class SimCLRSpriteViews:
    """Batched SimCLR views of rendered sprites ``[B, 1, S, S]`` in ``[0, 1]``.

    Args:
        augmentation: A one-channel recipe whose ``crop_size`` is the sprites' side (the
            encoders flatten a fixed-size map), e.g. [`sprite_simclr_augmentation`][].
        image_size: Side of the sprites.

    Raises:
        ConfigError: ``augmentation.mean``/``std`` are not one channel, or
            ``augmentation.crop_size`` differs from ``image_size``.
    """

    def __init__(self, augmentation: SimCLRAugmentation, image_size: int = 64) -> None:
        if augmentation.channels != 1:
            raise ConfigError(
                "dSprites SimCLR views need a one-channel augmentation: set "
                f"augmentation.mean and augmentation.std to one value each, got "
                f"{augmentation.channels} channels",
                key="augmentation.mean",
            )
        if augmentation.crop_size != image_size:
            raise ConfigError(
                f"dSprites SimCLR views must keep the {image_size}x{image_size} size: set "
                f"augmentation.crop_size to {image_size}, got {augmentation.crop_size}",
                key="augmentation.crop_size",
            )
        self.augmentation = augmentation
        self.image_size = image_size
        self.pipeline = BatchAugmentation(augmentation)

    def __call__(self, images: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """One view of every sprite, every sample with its own parameters.

        Args:
            images: Float sprites ``[B, 1, S, S]`` in ``[0, 1]``.
            generator: Source of the parameters (``None``: torch's global RNG).

        Returns:
            float32 ``[B, 1, S, S]`` in ``[0, 1]``.
        """
        check_shape("images", images, ("B", 1, self.image_size, self.image_size))
        params = sample_view_params(
            self.augmentation, images.shape[0], self.image_size, self.image_size, generator
        )
        # The blur's normalised kernel can overshoot 1 by a rounding error: clamp.
        return self.pipeline.apply(images, params).clamp_(0.0, 1.0)

    def __repr__(self) -> str:
        return f"SimCLRSpriteViews({self.augmentation})"
