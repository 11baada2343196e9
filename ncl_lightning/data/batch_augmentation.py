"""The SimCLR view pipeline on whole batches, on the training device (GPU or CPU).

[`BatchAugmentation`][] draws the same per-sample random parameters as the torchvision
pipeline that [`SimCLRAugmentation.build`][] makes (random resized crop with
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

Parameters are drawn on the CPU ([`ncl_lightning.data.view_params`][]) and copied to the
device once; nothing after that reads a device value on the host, so a GPU batch never
waits for the host (about 250 queued operators per batch, whatever its size).
"""

from __future__ import annotations

import math

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
from ncl_lightning.data.view_params import (
    ANGLE,
    CONTRAST,
    CROP,
    FACTORS,
    FLIP,
    GRAY,
    HUE,
    JITTER,
    ORDER,
    SATURATION,
    SIGMA,
    SOLAR,
    ViewParams,
    crop_area_fraction,
    pack_params,
    params_to,
    sample_crops,
    sample_view_params,
)
from ncl_lightning.foundation.validation import check_shape


# --------------------------------------------------------------------------- geometry
def _sampling_grid(
    packed: Tensor, height: int, width: int, size: int, rotate: bool
) -> tuple[Tensor, Tensor | None]:
    """``grid_sample`` grid ``[B, size, size, 2]`` for crop -> rotate -> flip -> resize,
    and the ``[B, 1, size, size]`` mask of output pixels that rotation brings from
    outside the crop (torchvision fills them with 0), or ``None`` without rotation.

    Built on the device of ``packed`` (``[B, 18]``, [`pack_params`][])."""
    n, device = packed.shape[0], packed.device
    coords = (torch.arange(size, dtype=torch.float32, device=device) + 0.5) * (2.0 / size) - 1.0
    sign = 1.0 - 2.0 * packed[:, FLIP, None, None]  # flip is applied last: undo it first
    u = coords.view(1, 1, size) * sign  # [B, 1, S]: column (x) of every output pixel
    v = coords.view(1, size, 1).expand(n, size, 1)  # [B, S, 1]: row (y)
    outside = None
    if rotate:
        # torchvision rotates the resized (square) crop about its centre: undo that.
        theta = torch.deg2rad(packed[:, ANGLE, None, None])
        cos, sin = torch.cos(theta), torch.sin(theta)
        u, v = cos * u - sin * v, sin * u + cos * v  # both [B, S, S] now
        outside = ((u.abs() > 1) | (v.abs() > 1))[:, None]
    top, left, h, w = (t[:, None, None] for t in packed[:, CROP].unbind(1))
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
        order = packed[:, ORDER]  # [B, 4]: the op at each position
        factors = packed[:, FACTORS].gather(1, order.long())  # that op's factor
        on = packed[:, JITTER, None] > 0.5
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
        self._compiled = None  # capture(): the compiled apply_packed

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
        check_shape("images", images, ("B", self.augmentation.channels, "H", "W"))
        packed = self.draw(images, n_views)
        views = (self._compiled or self.apply_packed)(images, packed, n_views)
        return list(views.chunk(n_views))

    def draw(self, images: Tensor, n_views: int = 1) -> Tensor:
        """The packed parameters ``[n_views * B, 18]`` of ``n_views`` views of every image
        of ``images`` ``[B, C, H, W]``, drawn on the host and copied to their device once
        (view-major: rows ``v * B + i`` belong to view ``v`` of image ``i``)."""
        n, height, width = images.shape[0] * n_views, images.shape[2], images.shape[3]
        return params_to(self.sample(n, height, width), images.device)

    def apply(self, images: Tensor, params: ViewParams) -> Tensor:
        """Apply drawn ``params`` to ``images`` ``[B, C, H, W]``; float32 ``[B, C, S, S]``."""
        return self.apply_packed(images, params_to(params, images.device))

    def apply_packed(self, images: Tensor, packed: Tensor, n_views: int = 1) -> Tensor:
        """The device part of the views: ``n_views`` views of ``images`` ``[B, C, H, W]``
        with the packed parameters ``[n_views * B, 18]`` on the same device, as one float32
        ``[n_views * B, C, S, S]`` tensor (view-major).

        A pure tensor function (fixed shapes, no host read, no random draw), so
        ``torch.compile(fullgraph=True)`` traces it as one graph and CUDA graphs can
        replay it ([`capture`][])."""
        x = self._geometry(images, packed, n_views)
        x = self._colour(x, packed)
        return x.sub_(self.mean.to(x.device)).div_(self.std.to(x.device))  # x is ours

    def capture(self, mode: str | None) -> None:
        """Run [`apply_packed`][] as a ``torch.compile`` graph (``mode``:
        ``torch.compile``'s, e.g. ``"reduce-overhead"`` for CUDA graphs; ``None``: eager
        again). Shapes are fixed (``dynamic=False``): a batch of another size compiles once
        more."""
        self._compiled = (
            None
            if mode is None
            else torch.compile(self.apply_packed, fullgraph=True, dynamic=False, mode=mode)
        )

    def geometry(self, x: Tensor, params: ViewParams) -> Tensor:
        """Crop, rotate, flip and resize ``[B, C, H, W]`` to ``[B, C, S, S]``."""
        return self._geometry(x, params_to(params, x.device))

    def _geometry(self, images: Tensor, packed: Tensor, n_views: int = 1) -> Tensor:
        """``n_views`` crops of every image of ``images`` ``[B, C, H, W]`` (uint8, or float
        in [0, 1]) as float ``[n_views * B, C, S, S]`` in [0, 1], view-major as ``packed``.

        One ``grid_sample`` reads each source image once for all its views: the grids of
        an image's views are stacked along the output height (``[B, n_views * S, S, 2]``),
        so the source is never repeated per view; only the output is reordered to
        view-major at the end (one copy of the views, none with one view)."""
        size = self.augmentation.crop_size
        b, _, height, width = images.shape
        factor = max(1, math.ceil(max(height, width) / (2 * size))) if self.antialias else 1
        side = size * factor
        x = images.float()
        if images.dtype == torch.uint8:
            x = x.div_(255.0)  # a new tensor: images.float() copies uint8
        # Rows of packed are view-major (v * B + i); the grids are built image-major.
        by_image = packed.view(n_views, b, -1).transpose(0, 1).reshape(b * n_views, -1)
        rotate = self.augmentation.rotation != 0
        grid, outside = _sampling_grid(by_image, height, width, side, rotate)
        grid = grid.view(b, n_views * side, side, 2)
        out = F.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=False)
        if outside is not None:
            out = out.masked_fill(outside.view(b, 1, n_views * side, side), 0.0)
        if factor > 1:
            out = F.avg_pool2d(out, factor)  # windows never straddle two views: side % factor = 0
        c = out.shape[1]
        views = out.view(b, c, n_views, size, size).permute(2, 0, 1, 3, 4)
        return views.reshape(n_views * b, c, size, size)

    def _colour(self, x: Tensor, packed: Tensor) -> Tensor:
        aug, rgb = self.augmentation, x.shape[1] == 3
        if self._jitter:
            # The four positions' blends in order, and the hue shift twice: after
            # position 0 for the samples whose hue is at position 0 or 1, after position 2
            # for those at 2 or 3. A sample's blend at its hue position is the identity,
            # so each sample sees its ops in its order, and the HSV round trip runs twice
            # per batch, not at every position (it is the costliest op of the views).
            plan = _JitterPlan(packed)
            for i in range(4):
                gray = luma(x)
                other = torch.addcmul(
                    plan.mean_weight[:, i] * gray.mean((1, 2, 3), True),
                    plan.gray_weight[:, i],
                    gray,
                )
                x = torch.addcmul(other, plan.blend[:, i], x).clamp_(0.0, 1.0)
                if self._hue and rgb and i in (0, 2):
                    on = plan.hue_on[:, i] | plan.hue_on[:, i + 1]
                    shift = plan.hue[:, i] + plan.hue[:, i + 1]  # one of them is 0
                    x = torch.where(on, hue_shift(x, shift), x)
        if rgb and aug.grayscale_p > 0:
            x = torch.where(per_sample(packed[:, GRAY] > 0.5), luma(x).expand_as(x), x)
        if aug.blur_p > 0:
            x = gaussian_blur(x, packed[:, SIGMA], self.blur_kernel)
        if aug.solarize_p > 0:
            solar = per_sample(packed[:, SOLAR] > 0.5) & (x >= 0.5)
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
