"""The SimCLR view pipeline on whole batches, on the training device (GPU or CPU).

:class:`BatchAugmentation` draws the same per-sample random parameters as the torchvision
pipeline that :meth:`SimCLRAugmentation.build` makes (random resized crop with
torchvision's ten tries and centre-crop fallback, rotation, horizontal flip, colour
jitter in a random order per image, grayscale, Gaussian blur, solarisation) and applies
them to a uint8 batch ``[B, C, H, W]`` with a handful of batched tensor ops:

* crop, rotation, flip and resize are one ``grid_sample`` (bilinear; when the source is
  more than twice the crop size it is super-sampled and average-pooled, an antialias);
* colour ops are the torchvision formulas with per-sample factors;
* blur is one grouped convolution with a per-sample kernel.

Parameters, and every choice of which samples an op touches, are drawn on the CPU (from a
seeded ``torch.Generator`` or the global RNG), so the device never waits for the host. The
reference code needs NVIDIA DALI for this; plain torch ops run wherever torch runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ncl_lightning.data.transforms import SimCLRAugmentation
from ncl_lightning.runtime.errors import ConfigError

_GRAY_WEIGHTS = (0.2989, 0.587, 0.114)  # torchvision's rgb_to_grayscale (ITU-R 601-2)
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


# --------------------------------------------------------------------------- geometry
def _sampling_grid(
    params: ViewParams, height: int, width: int, size: int, device: torch.device
) -> tuple[Tensor, Tensor | None]:
    """``grid_sample`` grid ``[B, size, size, 2]`` for crop -> rotate -> flip -> resize,
    and the ``[B, 1, size, size]`` mask of output pixels that rotation brings from
    outside the crop (torchvision fills them with 0), or ``None`` without rotation."""
    n = params.crop.shape[0]
    coords = (torch.arange(size, dtype=torch.float32) + 0.5) * (2.0 / size) - 1.0  # centres
    v, u = torch.meshgrid(coords, coords, indexing="ij")  # [S, S]: row (y), column (x)
    u = u.expand(n, size, size)
    v = v.expand(n, size, size)
    u = torch.where(params.flip[:, None, None], -u, u)  # flip is applied last: undo it first
    outside = None
    if bool((params.angle != 0).any()):
        # torchvision rotates the resized (square) crop about its centre: undo that.
        theta = torch.deg2rad(params.angle)[:, None, None]
        cos, sin = torch.cos(theta), torch.sin(theta)
        u, v = cos * u - sin * v, sin * u + cos * v
        outside = ((u.abs() > 1) | (v.abs() > 1))[:, None]
    top, left, h, w = (t[:, None, None] for t in params.crop.unbind(1))
    # Crop coordinate in [-1, 1] -> source position (pixel edges at integers), clamped to
    # the crop's outer pixel centres as torchvision's resize of the cut-out crop clamps.
    x = torch.minimum(torch.maximum(left + (u + 1) * w / 2, left + 0.5), left + w - 0.5)
    y = torch.minimum(torch.maximum(top + (v + 1) * h / 2, top + 0.5), top + h - 0.5)
    x, y = x * (2.0 / width) - 1.0, y * (2.0 / height) - 1.0
    grid = torch.stack([x, y], dim=-1)
    return grid.to(device, non_blocking=True), (
        None if outside is None else outside.to(device, non_blocking=True)
    )


# ------------------------------------------------------------------------ colour ops
def _gray(x: Tensor) -> Tensor:
    """Luma ``[B, 1, H, W]`` of RGB ``[B, 3, H, W]`` (the image itself if one channel)."""
    if x.shape[1] == 1:
        return x
    r, g, b = x.unbind(1)
    return (_GRAY_WEIGHTS[0] * r + _GRAY_WEIGHTS[1] * g + _GRAY_WEIGHTS[2] * b).unsqueeze(1)


def _blend(x: Tensor, other: Tensor, factor: Tensor) -> Tensor:
    return (factor * x + (1.0 - factor) * other).clamp_(0.0, 1.0)


def adjust_brightness(x: Tensor, factor: Tensor) -> Tensor:
    """``clamp(f * x)`` per sample; ``x`` ``[B, C, H, W]`` in [0, 1], ``factor`` ``[B]``."""
    return (x * factor[:, None, None, None]).clamp_(0.0, 1.0)


def adjust_contrast(x: Tensor, factor: Tensor) -> Tensor:
    """Blend with the mean luma of each image (torchvision's ``adjust_contrast``)."""
    mean = _gray(x).mean(dim=(1, 2, 3), keepdim=True)
    return _blend(x, mean, factor[:, None, None, None])


def adjust_saturation(x: Tensor, factor: Tensor) -> Tensor:
    """Blend with the per-pixel luma (torchvision's ``adjust_saturation``)."""
    return _blend(x, _gray(x), factor[:, None, None, None])


def adjust_hue(x: Tensor, factor: Tensor) -> Tensor:
    """Rotate the hue by ``factor`` turns in HSV, per sample (``factor`` in [-0.5, 0.5])."""
    r, g, b = x.unbind(1)
    maxc, _ = x.max(dim=1)
    minc, _ = x.min(dim=1)
    delta = maxc - minc
    safe = torch.where(delta > 0, delta, torch.ones_like(delta))
    rc, gc, bc = (maxc - r) / safe, (maxc - g) / safe, (maxc - b) / safe
    hue = torch.where(maxc == r, bc - gc, torch.where(maxc == g, 2.0 + rc - bc, 4.0 + gc - rc))
    hue = torch.where(delta > 0, (hue / 6.0) % 1.0, torch.zeros_like(hue))
    sat = torch.where(maxc > 0, delta / torch.where(maxc > 0, maxc, torch.ones_like(maxc)), 0.0)
    hue = (hue + factor[:, None, None]) % 1.0
    # HSV -> RGB.
    h6 = hue * 6.0
    sector = torch.floor(h6).clamp_(0, 5)
    frac = h6 - sector
    p = maxc * (1.0 - sat)
    q = maxc * (1.0 - sat * frac)
    t = maxc * (1.0 - sat * (1.0 - frac))
    v = maxc
    choices = {
        0: (v, t, p),
        1: (q, v, p),
        2: (p, v, t),
        3: (p, q, v),
        4: (t, p, v),
        5: (v, p, q),
    }
    out = torch.zeros_like(x)
    for k, (rr, gg, bb) in choices.items():
        mask = (sector == k).unsqueeze(1)
        out = torch.where(mask, torch.stack([rr, gg, bb], dim=1), out)
    return out


_JITTER_OPS = (adjust_brightness, adjust_contrast, adjust_saturation, adjust_hue)


def _apply_to(x: Tensor, index: Tensor, fn, *args: Tensor) -> Tensor:
    """``x`` with ``fn(x[index], *args[index])`` written back at ``index``.

    ``index`` and ``args`` are host tensors: which samples an op touches is decided on the
    CPU, so a GPU batch never waits for the host.
    """
    if index.numel() == 0:
        return x
    idx = index.to(x.device, non_blocking=True)
    picked = (a.index_select(0, index).to(x.device, non_blocking=True) for a in args)
    part = fn(x.index_select(0, idx), *picked)
    return x.index_copy(0, idx, part)


def gaussian_blur(x: Tensor, sigma: Tensor, kernel_size: int) -> Tensor:
    """Per-sample Gaussian blur (reflect padding), as torchvision's ``gaussian_blur``.

    Args:
        x: ``[B, C, H, W]``.
        sigma: ``[B]`` standard deviations (> 0).
        kernel_size: Odd kernel side.
    """
    b, c, hgt, wid = x.shape
    half = (kernel_size - 1) / 2
    pos = torch.linspace(-half, half, kernel_size, device=x.device)
    kernel = torch.exp(-0.5 * (pos[None, :] / sigma[:, None]) ** 2)
    kernel = kernel / kernel.sum(dim=1, keepdim=True)  # [B, k]
    kernel = kernel.repeat_interleave(c, dim=0)  # [B*C, k]
    pad = kernel_size // 2
    y = F.pad(x.reshape(1, b * c, hgt, wid), (pad, pad, pad, pad), mode="reflect")
    y = F.conv2d(y, kernel[:, None, None, :], groups=b * c)
    y = F.conv2d(y, kernel[:, None, :, None], groups=b * c)
    return y.reshape(b, c, hgt, wid)


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
        self._jitter_ops = [op for op, s in enumerate(strengths) if s > 0]
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
        """Apply drawn ``params`` to ``images`` ``[B, C, H, W]``; float32 ``[B, C, S, S]``."""
        x = images.float()
        if images.dtype == torch.uint8:
            x = x / 255.0
        x = self.geometry(x, params)
        x = self.colour(x, params)
        return (x - self.mean.to(x.device)) / self.std.to(x.device)

    def geometry(self, x: Tensor, params: ViewParams) -> Tensor:
        """Crop, rotate, flip and resize ``[B, C, H, W]`` to ``[B, C, S, S]``."""
        size = self.augmentation.crop_size
        height, width = x.shape[-2:]
        factor = max(1, math.ceil(max(height, width) / (2 * size))) if self.antialias else 1
        grid, outside = _sampling_grid(params, height, width, size * factor, x.device)
        out = F.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=False)
        if outside is not None:
            out = out.masked_fill(outside, 0.0)
        if factor > 1:
            out = F.avg_pool2d(out, factor)
        return out

    def colour(self, x: Tensor, params: ViewParams) -> Tensor:
        """Jitter (random order per sample), grayscale, blur and solarise ``[B, C, S, S]``."""
        for position in range(4):
            for op in self._jitter_ops:
                chosen = params.jitter & (params.order[:, position] == op)
                index = chosen.nonzero().squeeze(1)
                x = _apply_to(x, index, _JITTER_OPS[op], params.factors[:, op])
        if x.shape[1] == 3:
            x = _apply_to(x, params.gray.nonzero().squeeze(1), lambda t: _gray(t).expand_as(t))
        blur = (params.blur_sigma > 0).nonzero().squeeze(1)
        x = _apply_to(
            x, blur, lambda t, s: gaussian_blur(t, s, self.blur_kernel), params.blur_sigma
        )
        solar = params.solarize.nonzero().squeeze(1)
        return _apply_to(x, solar, lambda t: torch.where(t >= 0.5, 1.0 - t, t))

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
