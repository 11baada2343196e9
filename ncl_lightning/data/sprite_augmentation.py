"""Batched view augmentations for binary sprites (dSprites) that keep the ground truth.

The SimCLR pipeline (random resized crops, flips, rotations, colour jitter) is wrong for
dSprites: a crop or a translation of more than a pixel or two changes the *position*
factors, a rotation the *orientation*, a flip both (and a heart's orientation), a resize
the *scale*, and colour jitter on a binary image is a no-op or a threshold. Views for
contrastive pre-training on ground-truth-factor data must leave every factor recoverable
(Locatello et al., ICML 2019, discuss why the augmentations then decide which factors a
contrastive model can identify). ``SpriteAugmentation`` therefore only perturbs pixels:

* **translation** by at most ``max_shift`` pixels per axis (one posX/posY step is 48/31 ≈
  1.5 px, so a 1-px shift stays below the factor's resolution), zero-filled, no wrap;
* **foreground dropout**: each pixel erased with a per-sample rate ``~ U(0, drop_prob)``
  (the sprite keeps its silhouette, shape, scale, angle and centre of mass on average);
* **salt noise**: each pixel set to 1 with a per-sample rate ``~ U(0, salt_prob)``
  (isolated background dots, no structure);
* **Gaussian blur** with probability ``blur_prob`` and a per-sample ``σ ~ U(blur_sigma)``
  (softens edges; a normalised kernel keeps the values in ``[0, 1]``).

Everything is vectorised over the batch (one random draw per sample and per pixel, no
Python loop over samples) and reproducible from a ``torch.Generator``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.foundation.validation import check_pair, check_range

# A shift this large would move the sprite by more than 5 position steps.
_MAX_SHIFT = 8


@dataclass
class SpriteAugmentation:
    """Pixel-level view augmentation of binary sprites ``[B, C, H, W]`` in ``[0, 1]``.

    Order: translation, foreground dropout, salt noise, blur. A zero strength or
    probability turns that step off. See the module docstring for why these operations.

    Args:
        max_shift: Largest translation in pixels along each axis; each sample draws an
            integer shift in ``[-max_shift, max_shift]`` per axis (0 disables it).
        drop_prob: Largest per-sample rate at which pixels are erased, in ``[0, 1)``.
        salt_prob: Largest per-sample rate at which pixels are set to 1, in ``[0, 1)``.
        blur_prob: Probability that a sample is blurred, in ``[0, 1]``.
        blur_sigma: ``(min, max)`` of the blur standard deviation in pixels
            (``0 < min <= max <= 3``).
    """

    max_shift: int = 1
    drop_prob: float = 0.2
    salt_prob: float = 0.002
    blur_prob: float = 0.5
    blur_sigma: tuple[float, float] = (0.3, 1.0)

    def __post_init__(self) -> None:
        check_range("max_shift", self.max_shift, 0, _MAX_SHIFT)
        check_range("drop_prob", self.drop_prob, 0, 1, "[)")
        check_range("salt_prob", self.salt_prob, 0, 1, "[)")
        check_range("blur_prob", self.blur_prob, 0, 1)
        self.blur_sigma = check_pair("blur_sigma", self.blur_sigma, 0, 3)

    def __call__(self, images: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """Augment a batch; every sample draws its own parameters.

        Args:
            images: Float images ``[B, C, H, W]`` with values in ``[0, 1]``.
            generator: Source of randomness on ``images``' device (``None``: global RNG).

        Returns:
            float ``[B, C, H, W]`` with values in ``[0, 1]`` (``{0, 1}`` without blur).
        """
        if images.ndim != 4 or not images.is_floating_point():
            raise ConfigError(
                f"images must be a float tensor [B, C, H, W], got {images.dtype} "
                f"{tuple(images.shape)}",
                key="images",
            )
        x = images
        if self.max_shift > 0:
            x = self._shift(x, generator)
        if self.drop_prob > 0:
            x = x * (self._bernoulli(x, self.drop_prob, generator) == 0)
        if self.salt_prob > 0:
            x = torch.where(self._bernoulli(x, self.salt_prob, generator), 1.0, x)
        if self.blur_prob > 0:
            x = self._blur(x, generator)
        return x

    @staticmethod
    def _bernoulli(x: Tensor, max_rate: float, generator: torch.Generator | None) -> Tensor:
        """Per-pixel Bernoulli mask ``[B, C, H, W]``, per-sample rate ``~ U(0, max_rate)``."""
        rate = torch.rand(x.shape[0], 1, 1, 1, generator=generator, device=x.device) * max_rate
        return torch.rand(x.shape, generator=generator, device=x.device) < rate

    def _shift(self, x: Tensor, generator: torch.Generator | None) -> Tensor:
        """Translate every sample by its own integer ``(dy, dx)``, zero-filled."""
        b, c, h, w = x.shape
        s = self.max_shift
        shifts = torch.randint(-s, s + 1, (2, b), generator=generator, device=x.device)
        padded = F.pad(x, (s, s, s, s))
        # Output pixel (i, j) reads padded pixel (i + s - dy, j + s - dx).
        rows = torch.arange(h, device=x.device) + s - shifts[0][:, None]  # [B, H]
        cols = torch.arange(w, device=x.device) + s - shifts[1][:, None]  # [B, W]
        batch = torch.arange(b, device=x.device)[:, None, None, None]
        channel = torch.arange(c, device=x.device)[None, :, None, None]
        return padded[batch, channel, rows[:, None, :, None], cols[:, None, None, :]]

    def _blur(self, x: Tensor, generator: torch.Generator | None) -> Tensor:
        """Separable Gaussian blur with a per-sample sigma; unblurred samples get a delta."""
        b, c, h, w = x.shape
        low, high = self.blur_sigma
        radius = math.ceil(3 * high)
        u = torch.rand(b, generator=generator, device=x.device)
        sigma = low + (high - low) * torch.rand(b, generator=generator, device=x.device)
        t = torch.arange(-radius, radius + 1, device=x.device, dtype=x.dtype)
        kernel = torch.exp(-(t**2) / (2 * sigma[:, None].to(x.dtype) ** 2))  # [B, K]
        kernel = kernel / kernel.sum(dim=1, keepdim=True)
        delta = (t == 0).to(x.dtype).expand_as(kernel)
        kernel = torch.where((u < self.blur_prob)[:, None], kernel, delta)
        kernel = kernel.repeat_interleave(c, dim=0)  # one kernel per (sample, channel)
        flat = x.reshape(1, b * c, h, w)
        flat = F.conv2d(flat, kernel[:, None, :, None], padding=(radius, 0), groups=b * c)
        flat = F.conv2d(flat, kernel[:, None, None, :], padding=(0, radius), groups=b * c)
        return flat.reshape(b, c, h, w).clamp(0.0, 1.0)
