"""Per-sample colour operations on whole batches, as torchvision's functionals.

Each takes a float batch ``[B, C, H, W]`` in [0, 1] and per-sample factors ``[B]``, and
runs as a handful of whole-batch tensor ops (no per-sample loop, no host read), so that a
GPU batch is queued work only. Used by ``
BatchAugmentation``; the formulas and factor ranges are torchvision's (``adjust_brightness``,
``adjust_contrast``, ``adjust_saturation``, ``adjust_hue``, ``gaussian_blur``).
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import Tensor

GRAY_WEIGHTS = (0.2989, 0.587, 0.114)  # torchvision's rgb_to_grayscale (ITU-R 601-2)


@functools.lru_cache(maxsize=16)
def constant(values: tuple[float, ...], device: torch.device, dtype: torch.dtype) -> Tensor:
    """A small constant ``[1, len(values), 1, 1]`` on ``device``, made once (a tensor
    built from Python numbers is a host-to-device copy each time)."""
    return torch.tensor(values, dtype=dtype).view(1, -1, 1, 1).to(device)


def luma(x: Tensor) -> Tensor:
    """Luma ``[B, 1, H, W]`` of RGB ``[B, 3, H, W]`` (the image itself if one channel)."""
    if x.shape[1] == 1:
        return x
    return (x * constant(GRAY_WEIGHTS, x.device, x.dtype)).sum(dim=1, keepdim=True)


def per_sample(factor: Tensor) -> Tensor:
    """``[B]`` per-sample values as ``[B, 1, 1, 1]``, to broadcast over images."""
    return factor.view(-1, 1, 1, 1)


def blend(x: Tensor, other: Tensor, factor: Tensor) -> Tensor:
    """``clamp(f * x + (1 - f) * other)``: ``x`` itself where ``f = 1`` (exactly)."""
    return (factor * x + (1.0 - factor) * other).clamp_(0.0, 1.0)


def adjust_brightness(x: Tensor, factor: Tensor) -> Tensor:
    """``clamp(f * x)`` per sample; ``x`` ``[B, C, H, W]`` in [0, 1], ``factor`` ``[B]``."""
    return (x * per_sample(factor)).clamp_(0.0, 1.0)


def adjust_contrast(x: Tensor, factor: Tensor) -> Tensor:
    """Blend with the mean luma of each image (torchvision's ``adjust_contrast``)."""
    mean = luma(x).mean(dim=(1, 2, 3), keepdim=True)
    return blend(x, mean, per_sample(factor))


def adjust_saturation(x: Tensor, factor: Tensor) -> Tensor:
    """Blend with the per-pixel luma (torchvision's ``adjust_saturation``)."""
    return blend(x, luma(x), per_sample(factor))


# HSV -> RGB in one broadcast formula (channel offsets n = 5, 3, 1 for R, G, B):
# c = V - V S clamp(min(k, 4 - k), 0, 1) with k = (n + 6 H) mod 6, and V S = max - min.
_HSV_OFFSETS = (5.0, 3.0, 1.0)


def hue_shift(x: Tensor, turns6: Tensor) -> Tensor:
    """[`adjust_hue`][] with the shift ``turns6`` ``[B, 1, 1, 1]`` in sixths of a turn."""
    maxc, largest = x.max(dim=1, keepdim=True)  # [B, 1, H, W]
    delta = maxc - x.amin(dim=1, keepdim=True)
    # Hue in sixths: 2 i + (x[i + 1] - x[i - 1]) / delta for the largest channel i. Where
    # two channels tie for the largest, both formulas give the same hue; where all three
    # tie, delta = 0 and the output is the grey maxc whatever the hue.
    spread = (x.roll(-1, dims=1) - x.roll(1, dims=1)).gather(1, largest)
    h6 = torch.addcdiv(2.0 * largest + turns6, spread, delta.clamp_min(_TINY))
    k = torch.remainder(h6 + constant(_HSV_OFFSETS, x.device, x.dtype), 6.0)
    ramp = torch.minimum(k, 4.0 - k).clamp_(0.0, 1.0)
    return maxc - delta * ramp


_TINY = torch.finfo(torch.float32).tiny


def adjust_hue(x: Tensor, factor: Tensor) -> Tensor:
    """Rotate the hue by ``factor`` turns in HSV, per sample (``factor`` ``[B]`` in
    [-0.5, 0.5]), as torchvision's ``adjust_hue``; a one-channel image is returned as is.

    About 20 whole-batch tensor ops, whatever the batch: RGB -> hue, then the closed form
    of HSV -> RGB on all three channels at once.
    """
    if x.shape[1] == 1:
        return x
    return hue_shift(x, 6.0 * per_sample(factor))


def _gaussian_kernels(sigma: Tensor, kernel_size: int) -> Tensor:
    """``[B, k]`` normalised Gaussian taps; the identity tap ``[0, .., 1, .., 0]`` where
    ``sigma <= 0`` (a blur that leaves the image exactly as it is)."""
    half = (kernel_size - 1) / 2
    pos = torch.linspace(-half, half, kernel_size, device=sigma.device)
    on = (sigma > 0)[:, None]
    safe = torch.where(on, sigma[:, None], 1.0)
    kernel = torch.exp(-0.5 * (pos[None, :] / safe) ** 2)
    kernel = kernel / kernel.sum(dim=1, keepdim=True)
    return torch.where(on, kernel, (pos == 0).to(kernel.dtype))


def gaussian_blur(x: Tensor, sigma: Tensor, kernel_size: int) -> Tensor:
    """Per-sample Gaussian blur (reflect padding), as torchvision's ``gaussian_blur``.

    Args:
        x: ``[B, C, H, W]``.
        sigma: ``[B]`` standard deviations; ``0`` leaves that sample unchanged.
        kernel_size: Odd kernel side.
    """
    b, c, hgt, wid = x.shape
    kernel = _gaussian_kernels(sigma.to(x.device, x.dtype), kernel_size)
    kernel = kernel[:, None, :].expand(b, c, kernel_size).reshape(b * c, kernel_size)
    pad = kernel_size // 2
    y = F.pad(x.reshape(1, b * c, hgt, wid), (pad, pad, pad, pad), mode="reflect")
    y = F.conv2d(y, kernel[:, None, None, :], groups=b * c)
    y = F.conv2d(y, kernel[:, None, :, None], groups=b * c)
    return y.reshape(b, c, hgt, wid)


__all__ = [
    "GRAY_WEIGHTS",
    "adjust_brightness",
    "adjust_contrast",
    "adjust_hue",
    "adjust_saturation",
    "blend",
    "constant",
    "gaussian_blur",
    "hue_shift",
    "luma",
    "per_sample",
]
