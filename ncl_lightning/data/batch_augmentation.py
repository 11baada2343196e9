"""The SimCLR view pipeline on whole batches, on the training device (GPU or CPU).

:class:`BatchAugmentation` draws the same per-sample random parameters as the torchvision
pipeline that :meth:`SimCLRAugmentation.build` makes (random resized crop with
torchvision's ten tries and centre-crop fallback, rotation, horizontal flip, colour
jitter in a random order per image, grayscale, Gaussian blur, solarisation) and applies
them to a uint8 batch ``[B, C, H, W]`` with a handful of batched tensor ops:

* crop, rotation, flip and resize are one ``grid_sample`` (bilinear; when the source is
  more than twice the crop size it is super-sampled and average-pooled, an antialias);
* colour ops are the torchvision formulas with per-sample factors, on the whole batch:
  brightness, contrast and saturation are one blend whose per-sample factor is exactly
  the identity (1) where a sample's op at that position is another or jitter is off;
  hue, grayscale and solarisation are selected per sample with ``torch.where``;
* blur is one grouped convolution with a per-sample kernel (the identity tap where a
  sample is not blurred).

Parameters are drawn on the CPU (from a seeded ``torch.Generator`` or the global RNG),
packed into one ``[B, 18]`` tensor and copied to the device once (from pinned memory on a
GPU, so asynchronously). Nothing after that reads a device value on the host: no
``nonzero``, ``item`` or subset indexing, so a GPU batch never waits for the host and the
host only queues about 250 operators per batch, whatever its size. The reference code
needs NVIDIA DALI for this; plain torch ops run wherever torch runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ncl_lightning.data.colour_ops import (
    adjust_brightness,
    adjust_contrast,
    adjust_hue,
    adjust_saturation,
    gaussian_blur,
    hue_shift,
    luma,
    per_sample,
)
from ncl_lightning.data.transforms import SimCLRAugmentation
from ncl_lightning.runtime.errors import ConfigError

_CROP_TRIES = 10  # torchvision RandomResizedCrop.get_params
BRIGHTNESS, CONTRAST, SATURATION, HUE = range(4)  # ColorJitter's op indices


@dataclass
class ViewParams:
    """Per-sample random parameters of one batch of ``B`` views (all on the CPU).

    Attributes:
        crop: ``[B, 4]`` crop boxes ``(top, left, height, width)`` in source pixels.
        angle: ``[B]`` rotation in degrees (0 without rotation).
        flip: ``[B]`` bool, horizontal flip.
        jitter: ``[B]`` bool, colour jitter applied.
        factors: ``[B, 4]`` brightness, contrast, saturation and hue factors (the
            identity ``1, 1, 1, 0`` where jitter is off or an op has strength 0).
        order: ``[B, 4]`` the permutation of the four jitter ops per sample.
        gray: ``[B]`` bool, converted to grayscale.
        blur_sigma: ``[B]`` blur standard deviation (0: no blur).
        solarize: ``[B]`` bool, solarised.
    """

    crop: Tensor
    angle: Tensor
    flip: Tensor
    jitter: Tensor
    factors: Tensor
    order: Tensor
    gray: Tensor
    blur_sigma: Tensor
    solarize: Tensor


def crop_area_fraction(params: ViewParams, height: int, width: int) -> Tensor:
    """``[B]`` crop areas of ``params`` as fractions of a ``height x width`` source."""
    return params.crop[:, 2] * params.crop[:, 3] / (height * width)


def _uniform(low: float, high: float, shape: tuple[int, ...], generator: torch.Generator | None):
    return low + (high - low) * torch.rand(shape, generator=generator)


def _bernoulli(p: float, n: int, generator: torch.Generator | None) -> Tensor:
    return torch.rand(n, generator=generator) < p


def sample_crops(
    aug: SimCLRAugmentation, n: int, height: int, width: int, generator: torch.Generator | None
) -> Tensor:
    """RandomResizedCrop boxes ``[n, 4]`` ``(top, left, h, w)``, torchvision's algorithm.

    Up to ten tries of area ``U(scale) * H * W`` and log-uniform aspect ratio; the first
    that fits is kept, else the centre crop clamped to the ratio range.
    """
    area = height * width
    target = area * _uniform(*aug.crop_scale, (n, _CROP_TRIES), generator)
    log_ratio = _uniform(
        math.log(aug.crop_ratio[0]), math.log(aug.crop_ratio[1]), (n, _CROP_TRIES), generator
    )
    ratio = torch.exp(log_ratio)
    w = torch.round(torch.sqrt(target * ratio))
    h = torch.round(torch.sqrt(target / ratio))
    fits = (w > 0) & (w <= width) & (h > 0) & (h <= height)
    first = fits.to(torch.uint8).argmax(dim=1, keepdim=True)  # first fitting try
    w, h = w.gather(1, first).squeeze(1), h.gather(1, first).squeeze(1)
    top = torch.floor(torch.rand(n, generator=generator) * (height - h + 1))
    left = torch.floor(torch.rand(n, generator=generator) * (width - w + 1))
    # torchvision's fallback: the whole image, cut to the nearest allowed aspect ratio.
    in_ratio = width / height
    if in_ratio < aug.crop_ratio[0]:
        fw, fh = width, round(width / aug.crop_ratio[0])
    elif in_ratio > aug.crop_ratio[1]:
        fw, fh = round(height * aug.crop_ratio[1]), height
    else:
        fw, fh = width, height
    none = ~fits.any(dim=1)
    h = torch.where(none, float(fh), h)
    w = torch.where(none, float(fw), w)
    top = torch.where(none, float((height - fh) // 2), top)
    left = torch.where(none, float((width - fw) // 2), left)
    return torch.stack([top, left, h, w], dim=1)


def sample_view_params(
    aug: SimCLRAugmentation,
    n: int,
    height: int,
    width: int,
    generator: torch.Generator | None = None,
) -> ViewParams:
    """Draw the parameters of ``n`` views of ``height x width`` sources.

    The distributions are torchvision's for the ops ``aug.build()`` composes: factors
    ``U(max(0, 1 - s), 1 + s)`` for brightness, contrast and saturation, ``U(-h, h)`` for
    hue, a uniform random order of the four jitter ops, rotation ``U(-r, r)`` degrees,
    blur sigma ``U(blur_sigma)``, each op applied with its probability.
    """
    crop = sample_crops(aug, n, height, width, generator)
    angle = _uniform(-aug.rotation, aug.rotation, (n,), generator)
    flip = _bernoulli(aug.flip_p, n, generator)
    strengths = (aug.brightness, aug.contrast, aug.saturation)
    jitter_on = aug.jitter_p > 0 and any(s > 0 for s in (*strengths, aug.hue))
    jitter = _bernoulli(aug.jitter_p, n, generator) & jitter_on
    factors = torch.stack(
        [_uniform(max(0.0, 1.0 - s), 1.0 + s, (n,), generator) for s in strengths]
        + [_uniform(-aug.hue, aug.hue, (n,), generator)],
        dim=1,
    )
    identity = torch.tensor([1.0, 1.0, 1.0, 0.0])
    factors = torch.where(jitter[:, None], factors, identity)
    order = torch.argsort(torch.rand(n, 4, generator=generator), dim=1)
    gray = _bernoulli(aug.grayscale_p, n, generator)
    sigma = _uniform(*aug.blur_sigma, (n,), generator)
    blur_sigma = torch.where(_bernoulli(aug.blur_p, n, generator), sigma, 0.0)
    solarize = _bernoulli(aug.solarize_p, n, generator)
    return ViewParams(crop, angle, flip, jitter, factors, order, gray, blur_sigma, solarize)


# ------------------------------------------------------------- one copy to the device
# Columns of the packed parameter tensor: every per-sample number of a ViewParams, as
# float32 (crop boxes and op indices are small integers, exact in float32).
_CROP, _ANGLE, _FLIP, _JITTER, _FACTORS, _ORDER, _GRAY, _SIGMA, _SOLAR = (
    slice(0, 4),
    4,
    5,
    6,
    slice(7, 11),
    slice(11, 15),
    15,
    16,
    17,
)
_COLUMNS = 18


def pack_params(params: ViewParams) -> Tensor:
    """The parameters of ``B`` views as one float32 ``[B, 18]`` host tensor (one copy)."""
    return torch.cat(
        [
            params.crop.float(),
            params.angle.float()[:, None],
            params.flip.float()[:, None],
            params.jitter.float()[:, None],
            params.factors.float(),
            params.order.float(),
            params.gray.float()[:, None],
            params.blur_sigma.float()[:, None],
            params.solarize.float()[:, None],
        ],
        dim=1,
    )


def params_to(params: ViewParams, device: torch.device) -> Tensor:
    """:func:`pack_params` on ``device``: one host-to-device copy, from pinned memory on a
    GPU so that it is asynchronous (a copy from pageable memory makes the host wait)."""
    packed = pack_params(params)
    if device.type == "cuda":
        return packed.pin_memory().to(device, non_blocking=True)
    return packed.to(device)


# --------------------------------------------------------------------------- geometry
def _sampling_grid(
    packed: Tensor, height: int, width: int, size: int, rotate: bool
) -> tuple[Tensor, Tensor | None]:
    """``grid_sample`` grid ``[B, size, size, 2]`` for crop -> rotate -> flip -> resize,
    and the ``[B, 1, size, size]`` mask of output pixels that rotation brings from
    outside the crop (torchvision fills them with 0), or ``None`` without rotation.

    Built on the device of ``packed`` (``[B, 18]``, :func:`pack_params`)."""
    n, device = packed.shape[0], packed.device
    coords = (torch.arange(size, dtype=torch.float32, device=device) + 0.5) * (2.0 / size) - 1.0
    sign = 1.0 - 2.0 * packed[:, _FLIP, None, None]  # flip is applied last: undo it first
    u = coords.view(1, 1, size) * sign  # [B, 1, S]: column (x) of every output pixel
    v = coords.view(1, size, 1).expand(n, size, 1)  # [B, S, 1]: row (y)
    outside = None
    if rotate:
        # torchvision rotates the resized (square) crop about its centre: undo that.
        theta = torch.deg2rad(packed[:, _ANGLE, None, None])
        cos, sin = torch.cos(theta), torch.sin(theta)
        u, v = cos * u - sin * v, sin * u + cos * v  # both [B, S, S] now
        outside = ((u.abs() > 1) | (v.abs() > 1))[:, None]
    top, left, h, w = (t[:, None, None] for t in packed[:, _CROP].unbind(1))
    # Crop coordinate in [-1, 1] -> source position (pixel edges at integers), clamped to
    # the crop's outer pixel centres as torchvision's resize of the cut-out crop clamps.
    x = torch.clamp(left + (u + 1) * w / 2, min=left + 0.5, max=left + w - 0.5)
    y = torch.clamp(top + (v + 1) * h / 2, min=top + 0.5, max=top + h - 0.5)
    x, y = x * (2.0 / width) - 1.0, y * (2.0 / height) - 1.0
    grid = torch.stack(torch.broadcast_tensors(x, y), dim=-1)
    return grid, outside


class _JitterPlan:
    """What each of the four jitter positions does to each sample, as ``[B, 4, 1, 1, 1]``
    device tensors (sample, position), from the packed parameters ``[B, 18]``.

    Brightness, contrast and saturation are one blend
    ``clamp(f x + (1 - f) w_c mean_luma + (1 - f) w_s luma)`` with ``(w_c, w_s)`` = (0, 0),
    (1, 0) or (0, 1): brightness, contrast, saturation; ``f = 1`` (the identity, exactly)
    where the sample's op at that position is hue or jitter is off. Hue is masked.
    """

    def __init__(self, packed: Tensor) -> None:
        order = packed[:, _ORDER]  # [B, 4]: the op at each position
        factors = packed[:, _FACTORS].gather(1, order.long())  # that op's factor
        on = packed[:, _JITTER, None] > 0.5
        # An op of strength 0 (which ColorJitter leaves out) has the factor 1 (0 for hue,
        # which the caller then skips): its blend is exactly the identity.
        blend = torch.where(on & (order < HUE), factors, 1.0)
        rest = 1.0 - blend

        def columns(t: Tensor) -> Tensor:  # [B, 4] -> [B, 4, 1, 1, 1]
            return t.view(-1, 4, 1, 1, 1)

        self.blend = columns(blend)
        self.mean_weight = columns(rest * (on & (order == CONTRAST)))
        self.gray_weight = columns(rest * (on & (order == SATURATION)))
        self.hue_on = columns(on & (order == HUE))
        self.hue = columns(torch.where(self.hue_on.view(-1, 4), 6.0 * factors, 0.0))


class BatchAugmentation(nn.Module):
    """Batched SimCLR views of uint8 images, on the device the images are on.

    Args:
        augmentation: The pipeline's parameters (the same dataclass the CPU pipeline
            builds from), so one config describes both.
        seed: Seed of a private generator for the random parameters; ``None`` draws from
            torch's global RNG (seeded by ``seed_everything``).
        antialias: Super-sample the crop when the source is more than twice the output
            side (large images cropped to 224, say); no effect on 32x32 CIFAR crops.

    Example:
        >>> aug = BatchAugmentation(cifar_augmentation(), seed=0)
        >>> views = aug(images_uint8, n_views=2)  # 2 x [B, 3, 32, 32] float32, normalised
    """

    def __init__(
        self, augmentation: SimCLRAugmentation, seed: int | None = None, antialias: bool = True
    ) -> None:
        super().__init__()
        self.augmentation = augmentation
        self.seed = seed
        self.antialias = antialias
        self.generator = None if seed is None else torch.Generator().manual_seed(seed)
        self.register_buffer(
            "mean", torch.tensor(augmentation.mean).view(1, -1, 1, 1), persistent=False
        )
        self.register_buffer(
            "std", torch.tensor(augmentation.std).view(1, -1, 1, 1), persistent=False
        )
        strengths = (augmentation.brightness, augmentation.contrast)
        strengths += (augmentation.saturation, augmentation.hue)
        # Ops of strength 0 are left out, as ColorJitter leaves them out (factor None).
        self._jitter = augmentation.jitter_p > 0 and any(s > 0 for s in strengths)
        self._hue = augmentation.hue > 0
        self.blur_kernel = augmentation.blur_kernel_side  # as SimCLRAugmentation.build

    def sample(self, n: int, height: int, width: int) -> ViewParams:
        """Draw the parameters of ``n`` views of ``height x width`` sources."""
        return sample_view_params(self.augmentation, n, height, width, self.generator)

    def forward(self, images: Tensor, n_views: int = 1) -> list[Tensor]:
        """``n_views`` independent views of every image.

        Args:
            images: uint8 ``[B, C, H, W]`` in [0, 255] (or float in [0, 1]).
            n_views: Views per image.

        Returns:
            ``n_views`` float32 tensors ``[B, C, crop_size, crop_size]``, normalised.
        """
        if images.dim() != 4 or images.shape[1] != self.augmentation.channels:
            raise ConfigError(
                f"BatchAugmentation expects images [B, {self.augmentation.channels}, H, W], "
                f"got {tuple(images.shape)}",
                key="images",
            )
        batch = images.repeat(n_views, 1, 1, 1) if n_views > 1 else images
        params = self.sample(batch.shape[0], batch.shape[2], batch.shape[3])
        return list(self.apply(batch, params).chunk(n_views))

    def apply(self, images: Tensor, params: ViewParams) -> Tensor:
        """Apply drawn ``params`` to ``images`` ``[B, C, H, W]``; float32 ``[B, C, S, S]``.

        The parameters reach the device in one copy (pinned on a GPU); every op then runs
        on the whole batch with per-sample factors and masks, so the host only queues
        work: no host read of a device value, no per-op transfer, no subset indexing.
        """
        packed = params_to(params, images.device)
        x = images.float()
        if images.dtype == torch.uint8:
            x = x / 255.0
        x = self._geometry(x, packed)
        x = self._colour(x, packed)
        return (x - self.mean.to(x.device)) / self.std.to(x.device)

    def geometry(self, x: Tensor, params: ViewParams) -> Tensor:
        """Crop, rotate, flip and resize ``[B, C, H, W]`` to ``[B, C, S, S]``."""
        return self._geometry(x, params_to(params, x.device))

    def colour(self, x: Tensor, params: ViewParams) -> Tensor:
        """Jitter (random order per sample), grayscale, blur and solarise ``[B, C, S, S]``."""
        return self._colour(x, params_to(params, x.device))

    def _geometry(self, x: Tensor, packed: Tensor) -> Tensor:
        size = self.augmentation.crop_size
        height, width = x.shape[-2:]
        factor = max(1, math.ceil(max(height, width) / (2 * size))) if self.antialias else 1
        rotate = self.augmentation.rotation != 0
        grid, outside = _sampling_grid(packed, height, width, size * factor, rotate)
        out = F.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=False)
        if outside is not None:
            out = out.masked_fill(outside, 0.0)
        if factor > 1:
            out = F.avg_pool2d(out, factor)
        return out

    def _colour(self, x: Tensor, packed: Tensor) -> Tensor:
        aug, rgb = self.augmentation, x.shape[1] == 3
        if self._jitter:
            plan = _JitterPlan(packed)
            for i in range(4):  # the jitter positions, each op in its sample's order
                gray = luma(x)
                other = torch.addcmul(
                    plan.mean_weight[:, i] * gray.mean((1, 2, 3), True),
                    plan.gray_weight[:, i],
                    gray,
                )
                x = torch.addcmul(other, plan.blend[:, i], x).clamp_(0.0, 1.0)
                if self._hue and rgb:
                    x = torch.where(plan.hue_on[:, i], hue_shift(x, plan.hue[:, i]), x)
        if rgb and aug.grayscale_p > 0:
            x = torch.where(per_sample(packed[:, _GRAY] > 0.5), luma(x).expand_as(x), x)
        if aug.blur_p > 0:
            x = gaussian_blur(x, packed[:, _SIGMA], self.blur_kernel)
        if aug.solarize_p > 0:
            solar = per_sample(packed[:, _SOLAR] > 0.5) & (x >= 0.5)
            x = torch.where(solar, 1.0 - x, x)
        return x

    def extra_repr(self) -> str:
        return f"{self.augmentation}, seed={self.seed}"


def center_crop_normalize(images: Tensor, size: int, mean: Tensor, std: Tensor) -> Tensor:
    """The clean transform on a batch: centre crop ``size`` and normalise.

    Args:
        images: uint8 ``[B, C, H, W]`` (or float in [0, 1]) with ``H, W >= size``.
        size: Output side.
        mean: ``[1, C, 1, 1]`` normalisation mean.
        std: ``[1, C, 1, 1]`` normalisation standard deviation.
    """
    height, width = images.shape[-2:]
    top, left = round((height - size) / 2.0), round((width - size) / 2.0)
    x = images[..., top : top + size, left : left + size].float()
    if images.dtype == torch.uint8:
        x = x / 255.0
    return (x - mean.to(x.device)) / std.to(x.device)


__all__ = [
    "BatchAugmentation",
    "ViewParams",
    "adjust_brightness",
    "adjust_contrast",
    "adjust_hue",
    "adjust_saturation",
    "center_crop_normalize",
    "crop_area_fraction",
    "gaussian_blur",
    "pack_params",
    "params_to",
    "sample_crops",
    "sample_view_params",
]
