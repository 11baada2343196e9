"""Per-sample colour operations on whole batches, as torchvision's functionals.

Each takes a float batch ``[B, C, H, W]`` in [0, 1] and per-sample factors ``[B]``, and
runs as a handful of whole-batch tensor ops (no per-sample loop, no host read), so that a
GPU batch is queued work only. Used by ``
BatchAugmentation``; the formulas and factor ranges are torchvision's (``adjust_brightness``,
``adjust_contrast``, ``adjust_saturation``, ``adjust_hue``, ``gaussian_blur``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

GRAY_WEIGHTS = (0.2989, 0.587, 0.114)  # torchvision's rgb_to_grayscale (ITU-R 601-2)


def luma(x: Tensor) -> Tensor:
    """Luma ``[B, 1, H, W]`` of RGB ``[B, 3, H, W]`` (the image itself if one channel)."""
    if x.shape[1] == 1:
        return x
    # Python-number weights, no tensor built on the host: a compiled view graph (CUDA
    # graphs) must not copy host memory to the device.
    r, g, b = x.unbind(1)
    return (GRAY_WEIGHTS[0] * r + GRAY_WEIGHTS[1] * g + GRAY_WEIGHTS[2] * b).unsqueeze(1)


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
    """[`adjust_hue`][] with the shift ``turns6`` ``[B, 1, 1, 1]`` in sixths of a turn, on
    the three channel planes and in place on its own temporaries."""
    r, g, b = x[:, 0:1], x[:, 1:2], x[:, 2:3]
    maxc = torch.maximum(torch.maximum(r, g), b)  # [B, 1, H, W]
    delta = maxc - torch.minimum(torch.minimum(r, g), b)
    # Hue in sixths: 2 i + (x[i + 1] - x[i - 1]) / delta for the largest channel i (the
    # first of equal ones). Where two channels tie for the largest, both formulas give the
    # same hue; where all three tie, delta = 0 and the output is the grey maxc whatever
    # the hue.
    red, green = r == maxc, g == maxc
    spread = torch.where(red, g - b, torch.where(green, b - r, r - g))
    start = torch.where(red, turns6, torch.where(green, turns6 + 2.0, turns6 + 4.0))
    h6 = torch.addcdiv(start, spread, delta.clamp_min(_TINY))
    offsets = _HSV_OFFSETS[0] - 2.0 * torch.arange(3, device=x.device, dtype=x.dtype)  # 5, 3, 1
    k = torch.remainder(h6 + offsets.view(1, 3, 1, 1), 6.0)
    ramp = torch.minimum(k, 4.0 - k).clamp_(0.0, 1.0)
    return ramp.mul_(delta).neg_().add_(maxc)  # maxc - delta * ramp


_TINY = torch.finfo(torch.float32).tiny


def adjust_hue(x: Tensor, factor: Tensor) -> Tensor:
    """Rotate the hue by ``factor`` turns in HSV, per sample (``factor`` ``[B]`` in
    [-0.5, 0.5]), as torchvision's ``adjust_hue``; a one-channel image is returned as is."""
    if x.shape[1] == 1:
        return x
    return hue_shift(x, 6.0 * per_sample(factor))


# Taps below this are set to 0. Gaussian tails reach float32's denormal range (below
# 1.2e-38) for sigma around 0.8 at the 23-px kernel of 224-px views; a product of a
# denormal tap or of a tiny tap and a small pixel makes x86 CPUs take a micro-code
# assist per operation (torchvision's 2-D blur of a 224-px view: ~70 ms instead of ~16).
# Dropping taps of 1e-20 or less changes a blurred pixel by at most 1e-18.
TAP_FLOOR = 1e-20


def _gaussian_kernels(sigma: Tensor, kernel_size: int) -> Tensor:
    """``[B, k]`` normalised Gaussian taps, those below ``TAP_FLOOR`` times the centre tap
    set to 0 (no denormal); the identity tap ``[0, .., 1, .., 0]`` where ``sigma <= 0``
    (a blur that leaves the image exactly as it is)."""
    half = (kernel_size - 1) / 2
    pos = torch.linspace(-half, half, kernel_size, device=sigma.device)
    on = (sigma > 0)[:, None]
    safe = torch.where(on, sigma[:, None], 1.0)
    kernel = torch.exp(-0.5 * (pos[None, :] / safe) ** 2)
    kernel = torch.where(kernel > TAP_FLOOR, kernel, 0.0)
    kernel = kernel / kernel.sum(dim=1, keepdim=True)
    return torch.where(on, kernel, (pos == 0).to(kernel.dtype))


def gaussian_taps(sigma: float, kernel_size: int) -> list[float]:
    """The non-zero centre of the normalised ``kernel_size`` Gaussian taps of ``sigma``
    (an odd number of taps, at most ``kernel_size``; ``[1.0]`` for a tiny ``sigma``):
    torchvision's taps with the tail below ``TAP_FLOOR`` times the centre tap cut off,
    in float32."""
    taps = _gaussian_kernels(torch.tensor([sigma], dtype=torch.float32), kernel_size)[0]
    cut = int(taps[: kernel_size // 2].eq(0).sum())  # zero taps on each side
    return taps[cut : kernel_size - cut].tolist()


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


def separable_gaussian_blur(image: Tensor, sigma: float, kernel_size: int) -> Tensor:
    """Gaussian blur of one float image (reflect padding), as torchvision's
    ``gaussian_blur`` with ``kernel_size`` and ``sigma`` but as two 1-D passes of shifted
    multiply-adds over only the taps above ``TAP_FLOOR``: no denormal, and about 10x faster
    than torchvision's 2-D convolution on a 224-px CPU image (the CPU view pipeline).

    Args:
        image: Float ``[..., C, H, W]``.
        sigma: Standard deviation in pixels (> 0).
        kernel_size: Odd kernel side; reflect padding needs ``kernel_size // 2 < H, W``.

    Returns:
        The blurred ``[..., C, H, W]`` (a new tensor).
    """
    taps = gaussian_taps(sigma, kernel_size)
    radius, (hgt, wid) = len(taps) // 2, image.shape[-2:]
    flat = image.reshape(-1, *image.shape[-3:])
    padded = F.pad(flat, (radius, radius, radius, radius), mode="reflect")
    rows = padded[..., :wid] * taps[0]
    for t in range(1, len(taps)):
        rows.add_(padded[..., t : t + wid], alpha=taps[t])
    out = rows[..., :hgt, :] * taps[0]
    for t in range(1, len(taps)):
        out.add_(rows[..., t : t + hgt, :], alpha=taps[t])
    return out.reshape(image.shape)


__all__ = [
    "GRAY_WEIGHTS",
    "adjust_brightness",
    "adjust_contrast",
    "adjust_hue",
    "adjust_saturation",
    "blend",
    "gaussian_blur",
    "gaussian_taps",
    "hue_shift",
    "luma",
    "per_sample",
    "separable_gaussian_blur",
]
