"""The random parameters of a batch of SimCLR views: drawn on the CPU as torchvision's
pipeline draws them, and packed into one tensor for a single copy to the device.

[`sample_view_params`][] gives the per-sample parameters of ``B`` views
([`ViewParams`][]); [`params_to`][] moves them to the training device in one
``[B, 18]`` float32 tensor whose columns are named by the constants below.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from ncl_lightning.data.transforms import SimCLRAugmentation

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
CROP, ANGLE, FLIP, JITTER = slice(0, 4), 4, 5, 6
FACTORS, ORDER, GRAY, SIGMA, SOLAR = slice(7, 11), slice(11, 15), 15, 16, 17


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
    """[`pack_params`][] on ``device``: one host-to-device copy, from pinned memory on a
    GPU so that it is asynchronous (a copy from pageable memory makes the host wait)."""
    packed = pack_params(params)
    if device.type == "cuda":
        return packed.pin_memory().to(device, non_blocking=True)
    return packed.to(device)
