"""SimCLR-style augmentations, their dataset presets and the multi-view wrapper.

``SimCLRAugmentation`` is a typed dataclass (so LightningCLI / jsonargparse turn it into
YAML) describing the stochastic view pipeline of SimCLR (Chen et al., 2020): random
resized crop, horizontal flip, colour jitter, random grayscale, Gaussian blur and
solarisation. ``build()`` gives the augmentation, ``clean()`` the deterministic
evaluation transform with the same normalisation. ``MultiView`` draws ``n_views``
independent augmentations of one image.

Both transforms accept a PIL image or an image tensor ``[C, H, W]`` (uint8 in [0, 255]
or float in [0, 1]) and return a normalised float tensor ``[C, H', W']``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor
from torchvision import tv_tensors
from torchvision.transforms import v2

from ncl_lightning.data.colour_ops import separable_gaussian_blur
from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.foundation.registry import Registry
from ncl_lightning.foundation.validation import (
    check_at_least,
    check_int,
    check_pair,
    check_positive,
    check_range,
)

CIFAR_MEAN: tuple[float, ...] = (0.4914, 0.4822, 0.4465)
CIFAR_STD: tuple[float, ...] = (0.2470, 0.2435, 0.2616)
CIFAR100_MEAN: tuple[float, ...] = (0.5071, 0.4865, 0.4409)
CIFAR100_STD: tuple[float, ...] = (0.2673, 0.2564, 0.2762)
IMAGENET_MEAN: tuple[float, ...] = (0.485, 0.456, 0.406)
IMAGENET_STD: tuple[float, ...] = (0.229, 0.224, 0.225)
# Pixel statistics of sklearn's load_digits after scaling 0..16 to [0, 1].
DIGITS_MEAN: tuple[float, ...] = (0.3053,)
DIGITS_STD: tuple[float, ...] = (0.3760,)


def blur_kernel_size(sigma_max: float, side: int) -> int:
    """Side of the Gaussian blur kernel for standard deviations up to ``sigma_max``.

    The kernel covers ``±3 sigma_max`` (``2 ceil(3 sigma_max) + 1`` taps, 13 for
    ``sigma_max = 2``), and is never smaller than SimCLR's "about 10 % of the image side"
    (Chen et al., 2020, Appendix A: 23 px at 224), odd and at least 3. A kernel of 10 %
    of a 32 px crop (3 px) truncates a σ = 2 Gaussian to a near box filter.

    Args:
        sigma_max: Largest blur standard deviation, in pixels.
        side: Side of the (square) image the blur runs on, in pixels.

    Returns:
        The odd kernel side in pixels.
    """
    tenth = int(0.1 * side) // 2 * 2 + 1
    return max(3, tenth, 2 * math.ceil(3 * sigma_max) + 1)


class SeparableGaussianBlur(v2.GaussianBlur):
    """torchvision's ``GaussianBlur`` (same σ draw from the global generator, same kernel
    side and taps, reflect padding) computed as two 1-D passes without denormal taps
    ([`separable_gaussian_blur`][ncl_lightning.data.colour_ops.separable_gaussian_blur]) on
    float images: within 2e-6 of torchvision's 2-D convolution, which on a 224-px CPU image
    costs ~70 ms per blurred view (denormal tail taps) against ~2-4 ms here. Other inputs
    (PIL, integer tensors) go to torchvision's kernel.

    """

    def transform(self, inpt: Any, params: dict[str, Any]) -> Any:
        if isinstance(inpt, Tensor) and inpt.is_floating_point():
            out = separable_gaussian_blur(
                inpt.as_subclass(Tensor), params["sigma"][0], self.kernel_size[0]
            )
            return tv_tensors.wrap(out, like=inpt) if isinstance(inpt, tv_tensors.TVTensor) else out
        return super().transform(inpt, params)


@dataclass
class SimCLRAugmentation:
    """Parameters of the SimCLR view pipeline (Chen et al., 2020, Appendix A).

    Order of operations: random resized crop, rotation, horizontal flip, colour jitter,
    grayscale, Gaussian blur, solarisation, then normalisation. An operation whose
    probability (or strength) is 0 is left out of the pipeline. The defaults are the CIFAR
    recipe ([`cifar_augmentation`][]), so a config that sets some fields keeps the others.

    Args:
        crop_size: Output side length of the random resized crop (pixels).
        crop_scale: Range of the crop area as a fraction of the image area, in (0, 1].
        crop_ratio: Range of the crop aspect ratio (width / height).
        rotation: Maximal random rotation in degrees (0 disables it).
        brightness: Colour-jitter brightness strength.
        contrast: Colour-jitter contrast strength.
        saturation: Colour-jitter saturation strength (RGB only).
        hue: Colour-jitter hue strength, in [0, 0.5] (RGB only).
        jitter_p: Probability of applying the colour jitter.
        grayscale_p: Probability of converting to grayscale (channels are kept).
        blur_p: Probability of a Gaussian blur (0.5, as in the CIFAR and ImageNet recipes).
        blur_sigma: Range of the blur standard deviation, in pixels (drawn uniformly).
        blur_kernel: Odd side of the blur kernel in pixels; ``None`` picks
            ``blur_kernel_size`` (``±3 σ_max``, at least ~10 % of ``crop_size``): 13 at
            32 px, 23 at 224 px for ``σ_max = 2``. Set 3 for the 3-px kernel that earlier
            versions used at 32 px. Reflect padding needs ``blur_kernel // 2 < crop_size``.
        solarize_p: Probability of solarising (threshold at half the intensity range).
        flip_p: Probability of a horizontal flip.
        mean: Per-channel normalisation mean (its length is the channel count).
        std: Per-channel normalisation standard deviation.
    """

    crop_size: int = 32
    crop_scale: tuple[float, float] = (0.08, 1.0)
    crop_ratio: tuple[float, float] = (3.0 / 4.0, 4.0 / 3.0)
    rotation: float = 0.0
    brightness: float = 0.8
    contrast: float = 0.8
    saturation: float = 0.8
    hue: float = 0.2
    jitter_p: float = 0.8
    grayscale_p: float = 0.2
    blur_p: float = 0.5
    blur_sigma: tuple[float, float] = (0.1, 2.0)
    blur_kernel: int | None = None
    solarize_p: float = 0.0
    flip_p: float = 0.5
    mean: tuple[float, ...] = CIFAR_MEAN
    std: tuple[float, ...] = CIFAR_STD

    def __post_init__(self) -> None:
        # Configs and Python callers may pass lists; keep hashable, immutable tuples.
        for name in ("crop_scale", "crop_ratio", "blur_sigma", "mean", "std"):
            setattr(self, name, tuple(float(v) for v in getattr(self, name)))
        check_int("crop_size", self.crop_size)
        check_pair("crop_scale", self.crop_scale, 0.0, 1.0)
        check_pair("crop_ratio", self.crop_ratio, 0.0, float("inf"))
        check_pair("blur_sigma", self.blur_sigma, 0.0, float("inf"))
        for name in ("rotation", "brightness", "contrast", "saturation"):
            check_at_least(name, getattr(self, name), 0)
        check_range("hue", self.hue, 0, 0.5)
        for name in ("jitter_p", "grayscale_p", "blur_p", "solarize_p", "flip_p"):
            check_range(name, getattr(self, name), 0, 1)
        if len(self.mean) == 0 or len(self.mean) != len(self.std):
            raise ConfigError(
                f"SimCLRAugmentation.mean and std must have the same non-zero length, got "
                f"{len(self.mean)} and {len(self.std)}",
                key="std",
            )
        for value in self.std:
            check_positive("std", value)
        if self.channels != 3:
            for name in ("saturation", "hue", "grayscale_p"):
                if getattr(self, name) > 0:
                    raise ConfigError(
                        f"SimCLRAugmentation.{name} needs RGB images but mean/std have "
                        f"{self.channels} channel(s); set it to 0",
                        key=name,
                    )
        self._check_blur_kernel()

    def _check_blur_kernel(self) -> None:
        # Reflect padding of kernel // 2 needs fewer pixels than the side: fail at config
        # time, not in the first training batch.
        if self.blur_kernel is not None:
            check_int("blur_kernel", self.blur_kernel)
            if self.blur_kernel % 2 == 0:
                raise ConfigError(
                    f"SimCLRAugmentation.blur_kernel must be odd, got {self.blur_kernel}",
                    key="blur_kernel",
                )
        kernel = self.blur_kernel_side
        if self.blur_p > 0 and kernel // 2 >= self.crop_size:
            key = "blur_kernel" if self.blur_kernel is not None else "blur_sigma"
            raise ConfigError(
                f"SimCLRAugmentation: a {kernel}-px blur kernel (blur_sigma max "
                f"{self.blur_sigma[1]}, blur_kernel {self.blur_kernel}) does not fit "
                f"crop_size={self.crop_size} (reflect padding needs kernel // 2 < crop_size); "
                f"lower blur_sigma or blur_kernel, or set blur_p: 0",
                key=key,
            )

    @property
    def channels(self) -> int:
        """Number of image channels the normalisation expects."""
        return len(self.mean)

    @property
    def blur_kernel_side(self) -> int:
        """The blur kernel side in pixels: ``blur_kernel``, or ``blur_kernel_size``
        of ``blur_sigma`` and ``crop_size``; both pipelines use it."""
        if self.blur_kernel is not None:
            return self.blur_kernel
        return blur_kernel_size(self.blur_sigma[1], self.crop_size)

    def build(self) -> Callable[[Any], Tensor]:
        """The stochastic view transform.

        Returns:
            A callable mapping a PIL image or image tensor ``[C, H, W]`` to a normalised
            float tensor ``[C, crop_size, crop_size]``.
        """
        # Crop, flip and jitter run on the input type: PIL's own ops are the fastest on
        # CPU for PIL images. Blur and solarisation run on float [0, 1] so that the
        # solarisation threshold is the same whatever the input type.
        ops: list[Callable[[Any], Any]] = [
            v2.RandomResizedCrop(
                self.crop_size, scale=self.crop_scale, ratio=self.crop_ratio, antialias=True
            )
        ]
        if self.rotation > 0:
            ops.append(
                v2.RandomRotation(self.rotation, interpolation=v2.InterpolationMode.BILINEAR)
            )
        if self.flip_p > 0:
            ops.append(v2.RandomHorizontalFlip(self.flip_p))
        jitter = {k: getattr(self, k) for k in ("brightness", "contrast", "saturation", "hue")}
        if self.jitter_p > 0 and any(v > 0 for v in jitter.values()):
            jitter_op = v2.ColorJitter(**{k: v for k, v in jitter.items() if v > 0})
            ops.append(v2.RandomApply([jitter_op], p=self.jitter_p))
        if self.grayscale_p > 0:
            ops.append(v2.RandomGrayscale(self.grayscale_p))
        ops += [v2.ToImage(), v2.ToDtype(torch.float32, scale=True)]
        if self.blur_p > 0:
            # Separable and denormal-free: torchvision's 2-D blur is ~20x slower at 224 px.
            blur = SeparableGaussianBlur(self.blur_kernel_side, sigma=self.blur_sigma)
            ops.append(v2.RandomApply([blur], p=self.blur_p))
        if self.solarize_p > 0:
            ops.append(v2.RandomSolarize(0.5, p=self.solarize_p))
        ops.append(v2.Normalize(self.mean, self.std))
        return v2.Compose(ops)

    def crop_flip(self) -> SimCLRAugmentation:
        """The same crop, rotation and flip without colour jitter, grayscale, blur or
        solarisation: the training augmentation of linear probes, fine-tuning and
        supervised (NCE) training."""
        return replace(self, jitter_p=0.0, grayscale_p=0.0, blur_p=0.0, solarize_p=0.0)

    def clean(self, resize: int | None = None) -> Callable[[Any], Tensor]:
        """The deterministic evaluation transform with this pipeline's normalisation.

        Args:
            resize: If given, resize the shorter side to ``resize`` and center-crop
                ``crop_size`` (e.g. 256 -> 224 on ImageNet); if ``None`` keep the image
                size (small datasets whose images are already ``crop_size``).

        Returns:
            A callable mapping a PIL image or image tensor ``[C, H, W]`` to a normalised
            float tensor ``[C, H', W']``.
        """
        # Resize and crop on the input type (PIL's bilinear for PIL images), as
        # torchvision's and timm's evaluation transforms do: an export's timm transform
        # then gives the same tensors.
        ops: list[Callable[[Any], Any]] = []
        if resize is not None:
            ops += [v2.Resize(resize, antialias=True), v2.CenterCrop(self.crop_size)]
        ops += [v2.ToImage(), v2.ToDtype(torch.float32, scale=True),
                v2.Normalize(self.mean, self.std)]  # fmt: skip
        return v2.Compose(ops)


AUGMENTATIONS: Registry[SimCLRAugmentation] = Registry("augmentation preset")
"""Presets by name (``"cifar"``, ``"imagenet"``, ``"digits"``)."""


@AUGMENTATIONS.register("cifar")
def cifar_augmentation(crop_size: int = 32) -> SimCLRAugmentation:
    """CIFAR-10/100 views of the NCL and BayesNCL releases.

    The releases' ``scripts/pretrain/cifar/augmentations/symmetric.yaml``:
    RandomResizedCrop(32, scale 0.08-1), colour jitter (0.8, 0.8, 0.8, 0.2) with p=0.8,
    grayscale p=0.2, Gaussian blur p=0.5 with σ ~ U(0.1, 2) (the range of their
    ``GaussianBlur``; a 13-px kernel, ``blur_kernel_size``), horizontal flip p=0.5,
    no solarisation; CIFAR mean/std. The default of the CIFAR-10/100 DataModules and,
    through [`scaled_augmentation`][], of image folders up to 64 px (the CIFAR subset).
    """
    return SimCLRAugmentation(crop_size=crop_size, blur_p=0.5, blur_sigma=(0.1, 2.0))


@AUGMENTATIONS.register("cifar100")
def cifar100_augmentation(crop_size: int = 32) -> SimCLRAugmentation:
    """[`cifar_augmentation`][] normalised with CIFAR-100's statistics, as the releases'
    pre-training on CIFAR-100 (``MEANS_N_STD`` in ``solo/data/pretrain_dataloader.py``)."""
    return replace(cifar_augmentation(crop_size), mean=CIFAR100_MEAN, std=CIFAR100_STD)


@AUGMENTATIONS.register("imagenet")
def imagenet_augmentation(crop_size: int = 224) -> SimCLRAugmentation:
    """ImageNet(-100) views of SimCLR (Chen et al., 2020, Appendix A).

    RandomResizedCrop(224, scale 0.08-1), colour jitter of strength 1 (0.8, 0.8, 0.8,
    0.2) with p=0.8, grayscale p=0.2, Gaussian blur p=0.5 (sigma 0.1-2, kernel ~10 % of
    the side: 23 px), flip p=0.5, no solarisation (BYOL's asymmetric recipe needs a different
    augmentation per view, which one shared augmentation does not express), ImageNet mean/std.
    """
    return SimCLRAugmentation(crop_size=crop_size, blur_p=0.5, mean=IMAGENET_MEAN, std=IMAGENET_STD)


@AUGMENTATIONS.register("digits")
def digits_augmentation() -> SimCLRAugmentation:
    """Label-preserving views of 8x8 single-channel digits (sklearn ``load_digits``).

    Crops keep at least half the area with a near-square ratio and a rotation of at most
    10 degrees, so a digit stays recognisable; no flips (a mirrored 2 or 7 is not the
    same digit); brightness/contrast jitter only (no colour on one channel).
    """
    return SimCLRAugmentation(
        crop_size=8,
        crop_scale=(0.5, 1.0),
        crop_ratio=(0.8, 1.25),
        rotation=10.0,
        brightness=0.4,
        contrast=0.4,
        saturation=0.0,
        hue=0.0,
        jitter_p=0.8,
        grayscale_p=0.0,
        blur_p=0.0,
        flip_p=0.0,
        mean=DIGITS_MEAN,
        std=DIGITS_STD,
    )


def scaled_augmentation(image_size: int) -> SimCLRAugmentation:
    """Default views for images of side ``image_size``: the CIFAR recipe for small
    images (<= 64 px), the ImageNet recipe (with blur, ImageNet statistics) above.

    Images of 6 px or less cannot hold the 13-px kernel of the CIFAR blur (σ up to 2):
    their views have no blur.
    """
    if image_size <= 64:
        cifar = cifar_augmentation()
        fits = blur_kernel_size(cifar.blur_sigma[1], image_size) // 2 < image_size
        return replace(cifar, crop_size=image_size, blur_p=cifar.blur_p if fits else 0.0)
    return imagenet_augmentation(crop_size=image_size)


class MultiView:
    """Apply a stochastic transform ``n_views`` times, independently, to one image.

    Args:
        transform: Augmentation mapping an image to a tensor ``[C, H, W]``.
        n_views: Number of views (>= 1).

    Example:
        >>> views = MultiView(cifar_augmentation().build(), n_views=2)(pil_image)
        >>> [v.shape for v in views]  # [torch.Size([3, 32, 32]), torch.Size([3, 32, 32])]
    """

    def __init__(self, transform: Callable[[Any], Tensor], n_views: int = 2) -> None:
        check_int("n_views", n_views)
        self.transform = transform
        self.n_views = n_views

    def __call__(self, img: Any) -> list[Tensor]:
        """Return ``n_views`` tensors ``[C, H, W]``, each an independent draw."""
        return [self.transform(img) for _ in range(self.n_views)]

    def __repr__(self) -> str:
        return f"MultiView(n_views={self.n_views}, transform={self.transform!r})"


__all__ = [
    "AUGMENTATIONS",
    "CIFAR100_MEAN",
    "CIFAR100_STD",
    "CIFAR_MEAN",
    "CIFAR_STD",
    "DIGITS_MEAN",
    "DIGITS_STD",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "MultiView",
    "SeparableGaussianBlur",
    "SimCLRAugmentation",
    "blur_kernel_size",
    "cifar_augmentation",
    "digits_augmentation",
    "imagenet_augmentation",
    "scaled_augmentation",
]
