"""BatchAugmentation (the SimCLR views on whole batches) against torchvision.

Every op is compared with torchvision's per-image functional in a slow Python loop, the
parameter sampler with torchvision's own ``RandomResizedCrop.get_params`` and the configured
probabilities, and the statistics measured on the output images with those of the CPU
pipeline (``SimCLRAugmentation.build()``). Tolerances of rates are four binomial standard
errors; tolerances of means are four standard errors of the difference.
"""

from __future__ import annotations

import functools
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torch import Tensor
from torchvision import transforms as v1
from torchvision.transforms.v2 import functional as TF

from ncl_lightning.data import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    BatchAugmentation,
    SimCLRAugmentation,
    cifar_augmentation,
    digits_augmentation,
    imagenet_augmentation,
    sample_view_params,
)
from ncl_lightning.data.batch_augmentation import (
    ViewParams,
    adjust_brightness,
    adjust_contrast,
    adjust_hue,
    adjust_saturation,
    center_crop_normalize,
    crop_area_fraction,
    gaussian_blur,
    sample_crops,
)
from ncl_lightning.data.memory import to_pil

SIGMAS = 4.0  # tolerance of every statistical comparison, in standard errors
N_VIEWS = 2000  # views per statistic measured on output images
# The CPU pipeline rounds to uint8 after the crop-resize and after each of the four PIL
# jitter ops, and PIL truncates: each rounding lowers pixel values by at most 0.5 / 255 on
# average. That shifts a mean intensity by up to 5 * 0.5 / 255 but a spread (a standard
# deviation over pixels or channels) only through the rounding noise, well below 0.5 / 255.
UINT8_BIAS = {"mean intensity": 5 * 0.5 / 255, "channel std": 0.5 / 255, "colourfulness": 0.5 / 255}


# --------------------------------------------------------------------------- helpers
def _rate_tol(p: float, n: int) -> float:
    return SIGMAS * math.sqrt(p * (1 - p) / n)


def _assert_rate(flags: Tensor, p: float, what: str) -> None:
    rate = flags.float().mean().item()
    assert abs(rate - p) <= _rate_tol(p, flags.numel()), f"{what}: rate {rate:.4f}, expected {p}"


def _assert_same_distribution(sample: Tensor, reference: Tensor, what: str) -> None:
    """Means within 4 standard errors of the difference; at each decile-ish quantile ``p``
    of ``sample``, the empirical CDF of ``reference`` brackets ``p`` (ties allowed) within
    4 standard errors of a two-sample CDF difference."""
    sample, reference = sample.double(), reference.double()
    n, m = len(sample), len(reference)
    se = math.sqrt(sample.var().item() / n + reference.var().item() / m)
    diff = sample.mean().item() - reference.mean().item()
    assert abs(diff) <= SIGMAS * se, f"{what}: means differ by {diff:.4f} (se {se:.4f})"
    for p in (0.1, 0.25, 0.5, 0.75, 0.9):
        q = torch.quantile(sample, p, interpolation="lower")
        below = (reference < q).double().mean().item()
        at_or_below = (reference <= q).double().mean().item()
        tol = SIGMAS * math.sqrt(p * (1 - p) * (1 / n + 1 / m))
        assert below - tol <= p <= at_or_below + tol, (
            f"{what}: quantile {p} of the sample is {q.item():.4f}, where the reference's "
            f"CDF is [{below:.4f}, {at_or_below:.4f}]"
        )


def _se_std(x: Tensor) -> float:
    """Standard error of the sample standard deviation (delta method, any distribution)."""
    x = x.double()
    s2 = x.var().item()
    m4 = ((x - x.mean()) ** 4).mean().item()
    return math.sqrt(max(m4 - s2**2, 0.0) / len(x)) / (2 * math.sqrt(s2))


def _unnormalise(x: Tensor, aug: SimCLRAugmentation) -> Tensor:
    mean = torch.tensor(aug.mean).view(1, -1, 1, 1)
    std = torch.tensor(aug.std).view(1, -1, 1, 1)
    return x * std + mean


def _device_views(aug: SimCLRAugmentation, image: Tensor, n: int, seed: int = 0) -> Tensor:
    """``n`` un-normalised device views of one uint8 image ``[C, H, W]``."""
    batch = image[None].expand(n, -1, -1, -1)
    return _unnormalise(BatchAugmentation(aug, seed=seed)(batch, n_views=1)[0], aug)


def _cpu_views(
    aug: SimCLRAugmentation, image: Tensor, n: int, seed: int = 0, pil: bool = True
) -> Tensor:
    """``n`` un-normalised views of one uint8 image by the torchvision CPU pipeline, fed a
    PIL image (as the loaders do) or the uint8 tensor."""
    transform = aug.build()
    source = to_pil(image) if pil else image
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        views = torch.stack([transform(source) for _ in range(n)])
    return _unnormalise(views, aug)


def _is_gray(views: Tensor) -> Tensor:
    """``[N]`` bool: every pixel has its three channels equal within 2/255."""
    return (views.amax(1) - views.amin(1)).amax(dim=(1, 2)) <= 2.0 / 255


def _ramp_image(size: int = 32) -> Tensor:
    """uint8 ``[3, S, S]``: red = 8 * column, green = 8 * row, blue constant."""
    ramp = torch.arange(size, dtype=torch.uint8) * 8
    image = torch.full((3, size, size), 128, dtype=torch.uint8)
    image[0] = ramp[None, :]
    image[1] = ramp[:, None]
    return image


def _read_rgb(path: Path) -> Tensor:
    array = np.asarray(Image.open(path).convert("RGB"))
    return torch.from_numpy(array.copy()).permute(2, 0, 1).contiguous()


@functools.lru_cache(maxsize=1)
def _colourful_cifar_image(root: Path) -> Tensor:
    """The real CIFAR training image (of every tenth) whose least colourful pixel is the most
    colourful: no crop of it is gray unless the pipeline made it gray."""
    files = sorted((root / "train").glob("*/*.png"))[::10]
    best, best_spread = None, -1
    for path in files:
        image = _read_rgb(path).int()
        spread = int((image.amax(0) - image.amin(0)).min())
        if spread > best_spread:
            best, best_spread = path, spread
    assert best is not None and best_spread >= 20, "no colourful image in the CIFAR subset"
    return _read_rgb(best)


def _rgb_batch(n: int, size: int, seed: int, channels: int = 3) -> Tensor:
    """Float ``[n, C, S, S]`` on the uint8 grid (so channel ties and gray pixels occur)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 256, (n, channels, size, size), generator=g).float() / 255
    if channels == 3:
        x[0] = x[0, :1].expand(3, -1, -1)  # a gray image
        x[1, 1] = x[1, 0]  # red == green everywhere
    return x


# ---------------------------------------------------------------- 1. colour ops
@pytest.mark.parametrize("channels", [3, 1])
@pytest.mark.parametrize(
    ("ours", "theirs"),
    [(adjust_brightness, TF.adjust_brightness), (adjust_contrast, TF.adjust_contrast)],
)
def test_brightness_contrast_match_torchvision(ours, theirs, channels: int) -> None:
    """Per-sample brightness/contrast equal torchvision's per-image op (RGB and 1 channel)."""
    x = _rgb_batch(8, 12, seed=0, channels=channels)
    factor = torch.linspace(0.0, 2.0, 8)
    out = ours(x.clone(), factor)
    ref = torch.stack([theirs(x[i], float(factor[i])) for i in range(len(x))])
    assert (out - ref).abs().max().item() < 1e-5


def test_saturation_matches_torchvision() -> None:
    """Per-sample saturation equals torchvision's ``adjust_saturation`` image by image."""
    x = _rgb_batch(8, 12, seed=1)
    factor = torch.linspace(0.0, 2.0, 8)
    out = adjust_saturation(x.clone(), factor)
    ref = torch.stack([TF.adjust_saturation(x[i], float(factor[i])) for i in range(len(x))])
    assert (out - ref).abs().max().item() < 1e-5


def test_hue_matches_torchvision() -> None:
    """Per-sample hue rotation equals torchvision's ``adjust_hue`` over the whole range."""
    x = _rgb_batch(9, 12, seed=2)
    factor = torch.linspace(-0.5, 0.5, 9)
    out = adjust_hue(x.clone(), factor)
    ref = torch.stack([TF.adjust_hue(x[i], float(factor[i])) for i in range(len(x))])
    assert (out - ref).abs().max().item() < 1e-5


def test_gaussian_blur_matches_torchvision() -> None:
    """Per-sample sigma blur equals torchvision's ``gaussian_blur`` (reflect padding)."""
    x = _rgb_batch(6, 16, seed=3)
    sigma = torch.tensor([0.1, 0.5, 0.9, 1.3, 1.7, 2.0])
    for kernel in (3, 5):
        out = gaussian_blur(x, sigma, kernel)
        ref = torch.stack(
            [
                TF.gaussian_blur(x[i], [kernel, kernel], [float(s), float(s)])
                for i, s in enumerate(sigma)
            ]
        )
        assert (out - ref).abs().max().item() < 1e-5


# ------------------------------------------------------------------- 2. geometry
@pytest.mark.parametrize(("height", "width"), [(32, 32), (20, 28)])
@pytest.mark.parametrize("flip", [False, True])
def test_geometry_matches_resized_crop(height: int, width: int, flip: bool) -> None:
    """Crop + resize (+ flip) in one grid_sample equals torchvision's ``resized_crop``
    (antialiased) and ``horizontal_flip`` image by image."""
    aug = cifar_augmentation()
    batch_aug = BatchAugmentation(aug, seed=0)
    n = 48
    x = torch.rand(n, 3, height, width, generator=torch.Generator().manual_seed(0))
    params = batch_aug.sample(n, height, width)
    params = replace(params, flip=torch.full((n,), flip))
    assert (params.angle == 0).all()
    out = batch_aug.geometry(x, params)
    ref = []
    for i in range(n):
        top, left, h, w = (int(v) for v in params.crop[i])
        view = TF.resized_crop(x[i], top, left, h, w, [32, 32], antialias=True)
        ref.append(TF.horizontal_flip(view) if flip else view)
    assert out.shape == (n, 3, 32, 32)
    assert (out - torch.stack(ref)).abs().max().item() < 1e-5


def test_apply_matches_torchvision_composition() -> None:
    """The whole pipeline on drawn params equals torchvision's functionals composed per
    image in the CPU pipeline's order: crop, flip, jitter in the drawn order, grayscale,
    blur, solarise, normalise."""
    aug = SimCLRAugmentation(
        blur_p=0.5, solarize_p=0.3, mean=IMAGENET_MEAN, std=IMAGENET_STD, grayscale_p=0.3
    )
    batch_aug = BatchAugmentation(aug, seed=1)
    n = 64
    images = torch.randint(0, 256, (n, 3, 32, 32), generator=torch.Generator().manual_seed(1))
    images = images.to(torch.uint8)
    params = batch_aug.sample(n, 32, 32)
    assert params.jitter.any() and params.gray.any() and params.solarize.any()
    assert (params.blur_sigma > 0).any()
    out = batch_aug.apply(images, params)
    ops = (TF.adjust_brightness, TF.adjust_contrast, TF.adjust_saturation, TF.adjust_hue)
    ref = []
    for i in range(n):
        top, left, h, w = (int(v) for v in params.crop[i])
        x = TF.resized_crop(images[i].float() / 255, top, left, h, w, [32, 32], antialias=True)
        if params.flip[i]:
            x = TF.horizontal_flip(x)
        if params.jitter[i]:
            for op in params.order[i].tolist():
                x = ops[op](x, float(params.factors[i, op]))
        if params.gray[i]:
            x = TF.rgb_to_grayscale(x, num_output_channels=3)
        if params.blur_sigma[i] > 0:
            sigma = float(params.blur_sigma[i])
            x = TF.gaussian_blur(x, [batch_aug.blur_kernel] * 2, [sigma, sigma])
        if params.solarize[i]:
            x = TF.solarize(x, 0.5)
        ref.append(TF.normalize(x, list(aug.mean), list(aug.std)))
    assert (out - torch.stack(ref)).abs().max().item() < 1e-4  # normalised: / std ~ 0.22


# ----------------------------------------------------------------- 3. crop boxes
def _torchvision_crops(aug: SimCLRAugmentation, n: int, height: int, width: int) -> Tensor:
    image = torch.empty(1, height, width)
    with torch.random.fork_rng():
        torch.manual_seed(123)
        boxes = [
            v1.RandomResizedCrop.get_params(image, list(aug.crop_scale), list(aug.crop_ratio))
            for _ in range(n)
        ]
    return torch.tensor(boxes, dtype=torch.float64)


@pytest.mark.parametrize(("height", "width"), [(32, 32), (24, 40)])
def test_sample_crops_distribution_matches_torchvision(height: int, width: int) -> None:
    """Crop boxes lie inside the image, obey the scale and ratio ranges up to torchvision's
    rounding of w and h, and their area fraction, aspect ratio and position have the
    distribution of ``RandomResizedCrop.get_params``."""
    aug = cifar_augmentation()
    n = 4000
    boxes = sample_crops(aug, n, height, width, torch.Generator().manual_seed(0)).double()
    ref = _torchvision_crops(aug, n, height, width)
    top, left, h, w = boxes.unbind(1)
    assert torch.equal(boxes, boxes.round()), "boxes are not whole pixels"
    assert (top >= 0).all() and (left >= 0).all() and (h >= 1).all() and (w >= 1).all()
    assert (top + h <= height).all() and (left + w <= width).all()
    area = height * width
    # w = round(sqrt(t * r)), h = round(sqrt(t / r)) with t in scale * area, r in ratio.
    assert ((w + 0.5) * (h + 0.5) >= aug.crop_scale[0] * area).all()
    assert ((w - 0.5) * (h - 0.5) <= aug.crop_scale[1] * area).all()
    assert ((w + 0.5) / (h - 0.5) >= aug.crop_ratio[0]).all()
    assert ((w - 0.5) / (h + 0.5) <= aug.crop_ratio[1]).all()
    params = ViewParams(boxes.float(), *([torch.zeros(n)] * 8))
    fraction = crop_area_fraction(params, height, width).double()
    torch.testing.assert_close(fraction, h * w / area)
    _assert_same_distribution(fraction, ref[:, 2] * ref[:, 3] / area, "area fraction")
    _assert_same_distribution(w / h, ref[:, 3] / ref[:, 2], "aspect ratio")
    _assert_same_distribution(top + h / 2, ref[:, 0] + ref[:, 2] / 2, "centre row")
    _assert_same_distribution(left + w / 2, ref[:, 1] + ref[:, 3] / 2, "centre column")


@pytest.mark.parametrize(
    ("height", "width", "ratio"),
    [(32, 32, (2.0, 3.0)), (40, 24, (2.0, 3.0)), (24, 40, (0.2, 0.3))],
)
def test_sample_crops_fallback_is_torchvision_centre_crop(
    height: int, width: int, ratio: tuple[float, float]
) -> None:
    """When none of the ten tries fits, the box is torchvision's centre-crop fallback."""
    aug = SimCLRAugmentation(crop_scale=(0.99, 1.0), crop_ratio=ratio)
    boxes = sample_crops(aug, 50, height, width, torch.Generator().manual_seed(0))
    expected = _torchvision_crops(aug, 3, height, width)
    assert (expected == expected[0]).all(), "the reference should be deterministic here"
    assert torch.equal(boxes, expected[0].float().expand(50, 4))


# ------------------------------------------------------------- 4. view parameters
def test_view_param_rates_and_ranges() -> None:
    """Rates of flip, grayscale, jitter, blur and solarisation match the config; factors
    are in their ranges, roughly uniform, and the identity where jitter is off; the jitter
    order is a uniform random permutation."""
    n = 20000
    aug = replace(imagenet_augmentation(crop_size=32), solarize_p=0.3)
    p = sample_view_params(aug, n, 32, 32, torch.Generator().manual_seed(0))
    _assert_rate(p.flip, aug.flip_p, "flip")
    _assert_rate(p.gray, aug.grayscale_p, "grayscale")
    _assert_rate(p.jitter, aug.jitter_p, "jitter")
    _assert_rate(p.blur_sigma > 0, aug.blur_p, "blur")
    _assert_rate(p.solarize, aug.solarize_p, "solarize")
    _assert_rate(p.gray & p.jitter, aug.grayscale_p * aug.jitter_p, "grayscale and jitter")
    assert (p.angle == 0).all()
    sigma = p.blur_sigma[p.blur_sigma > 0]
    assert sigma.min() >= aug.blur_sigma[0] and sigma.max() <= aug.blur_sigma[1]

    on = p.factors[p.jitter]
    assert (p.factors[~p.jitter] == torch.tensor([1.0, 1.0, 1.0, 0.0])).all()
    ranges = [(0.2, 1.8), (0.2, 1.8), (0.2, 1.8), (-0.2, 0.2)]
    for k, (low, high) in enumerate(ranges):
        f = on[:, k]
        assert f.min() >= low and f.max() <= high
        width = high - low
        assert f.min() < low + 0.01 * width and f.max() > high - 0.01 * width
        se = width / math.sqrt(12 * len(f))
        assert abs(f.mean().item() - (low + high) / 2) <= SIGMAS * se, f"factor {k} not uniform"

    assert torch.equal(p.order.sort(dim=1).values, torch.arange(4).expand(n, 4))
    for op in range(4):
        _assert_rate(p.order[:, 0] == op, 0.25, f"op {op} first")
        _assert_rate(p.order[:, 3] == op, 0.25, f"op {op} last")


def test_view_params_follow_config_switches() -> None:
    """Rotation is U(-r, r); jitter never happens with jitter_p=0 or all strengths 0;
    the flip rate follows flip_p (digits: never)."""
    n = 20000
    digits = sample_view_params(digits_augmentation(), n, 8, 8, torch.Generator().manual_seed(1))
    assert (digits.angle.abs() <= 10).all() and not digits.flip.any()
    assert abs(digits.angle.mean().item()) <= SIGMAS * 20 / math.sqrt(12 * n)
    assert abs(digits.angle.std().item() - 20 / math.sqrt(12)) < 0.1
    _assert_rate(digits.jitter, 0.8, "digits jitter")
    assert (digits.factors[:, 2:] == torch.tensor([1.0, 0.0])).all()  # no saturation/hue
    g = torch.Generator().manual_seed(2)
    for aug in (
        replace(cifar_augmentation(), jitter_p=0.0),
        replace(cifar_augmentation(), brightness=0.0, contrast=0.0, saturation=0.0, hue=0.0),
    ):
        p = sample_view_params(aug, 1000, 32, 32, g)
        assert not p.jitter.any()
        assert (p.factors == torch.tensor([1.0, 1.0, 1.0, 0.0])).all()
    flips = sample_view_params(replace(cifar_augmentation(), flip_p=0.2), n, 32, 32, g).flip
    _assert_rate(flips, 0.2, "flip_p=0.2")


# ------------------------------------------------------------- 5. output contract
def test_output_contract_cifar() -> None:
    """Two float32 normalised views per image, in [0, 1] once un-normalised, different
    from each other, reproducible by seed; float input in [0, 1] gives the uint8 result."""
    aug = cifar_augmentation()
    images = torch.randint(0, 256, (16, 3, 32, 32), generator=torch.Generator().manual_seed(0))
    images = images.to(torch.uint8)
    views = BatchAugmentation(aug, seed=0)(images, n_views=2)
    assert isinstance(views, list) and len(views) == 2
    for v in views:
        assert v.shape == (16, 3, 32, 32) and v.dtype == torch.float32
        assert torch.isfinite(v).all()
        raw = _unnormalise(v, aug)
        assert raw.min() >= -1e-5 and raw.max() <= 1 + 1e-5
    assert ((views[0] - views[1]).abs().amax(dim=(1, 2, 3)) > 1e-3).all()
    again = BatchAugmentation(aug, seed=0)(images, n_views=2)
    assert all(torch.equal(a, b) for a, b in zip(views, again, strict=True))
    other = BatchAugmentation(aug, seed=1)(images, n_views=2)
    assert not torch.equal(views[0], other[0])
    floats = BatchAugmentation(aug, seed=0)(images.float() / 255, n_views=2)
    for a, b in zip(views, floats, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


@pytest.mark.parametrize("source", [64, 128])
def test_output_contract_imagenet_crop_48(source: int) -> None:
    """The ImageNet recipe (blur p=0.5, ImageNet statistics) crops a 64 (or, through the
    antialiased path, a 128) pixel source to 48."""
    aug = SimCLRAugmentation(crop_size=48, blur_p=0.5, mean=IMAGENET_MEAN, std=IMAGENET_STD)
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (8, 3, source, source), generator=g).to(torch.uint8)
    batch_aug = BatchAugmentation(aug, seed=0)
    assert batch_aug.blur_kernel == 5
    views = batch_aug(images, n_views=2)
    for v in views:
        assert v.shape == (8, 3, 48, 48) and v.dtype == torch.float32
        raw = _unnormalise(v, aug)
        assert torch.isfinite(v).all() and raw.min() >= -1e-5 and raw.max() <= 1 + 1e-5
    assert not torch.equal(views[0], views[1])


def test_wrong_channel_count_raises() -> None:
    """A batch whose channels differ from mean/std (or that is not 4-D) names its shape."""
    batch_aug = BatchAugmentation(cifar_augmentation(), seed=0)
    with pytest.raises(ValueError, match=r"\(4, 1, 32, 32\)"):
        batch_aug(torch.zeros(4, 1, 32, 32, dtype=torch.uint8))
    with pytest.raises(ValueError, match=r"\(3, 32, 32\)"):
        batch_aug(torch.zeros(3, 32, 32, dtype=torch.uint8))


# ------------------------------------------------- 6. statistics of output images
@pytest.mark.parametrize("pipeline", ["device", "cpu"])
def test_grayscale_fraction_of_outputs(cifar_subset: Path, pipeline: str) -> None:
    """On a colourful real image, about grayscale_p = 0.2 of the CIFAR views are gray."""
    aug = cifar_augmentation()
    image = _colourful_cifar_image(cifar_subset)
    make = _device_views if pipeline == "device" else _cpu_views
    views = make(aug, image, N_VIEWS)
    _assert_rate(_is_gray(views), aug.grayscale_p, f"{pipeline} grayscale")


@pytest.mark.parametrize("flip_p", [0.5, 0.2])
@pytest.mark.parametrize("pipeline", ["device", "cpu-pil", "cpu-tensor"])
def test_flip_rate_of_outputs(flip_p: float, pipeline: str) -> None:
    """With the whole image as crop, every view is the image or its mirror, and the red
    ramp decreases left to right in about flip_p of the views."""
    aug = SimCLRAugmentation(
        crop_scale=(1.0, 1.0),
        crop_ratio=(1.0, 1.0),
        jitter_p=0.0,
        grayscale_p=0.0,
        flip_p=flip_p,
    )
    image = _ramp_image()
    if pipeline == "device":
        views = _device_views(aug, image, N_VIEWS)
    else:
        views = _cpu_views(aug, image, N_VIEWS, pil=pipeline == "cpu-pil")
    plain = image.float() / 255
    flipped = (views[:, 0, :, 0] > views[:, 0, :, -1]).all(dim=1)
    expected = torch.where(flipped[:, None, None, None], plain.flip(-1), plain)
    assert (views - expected).abs().max().item() < 1e-5
    _assert_rate(flipped, flip_p, f"{pipeline} flip")


def _estimated_area(views: Tensor, size: int = 32) -> tuple[Tensor, Tensor, Tensor]:
    """Crop widths, heights and area fractions read off the red (x) and green (y) ramps of
    ``_ramp_image``: bilinear upsampling keeps the crop's outer pixel centres, so a crop
    ``w`` pixels wide spans ``8 (w - 1)`` red levels."""
    levels = (views * 255).round()
    w = (levels[:, 0].amax(dim=(1, 2)) - levels[:, 0].amin(dim=(1, 2))) / 8 + 1
    h = (levels[:, 1].amax(dim=(1, 2)) - levels[:, 1].amin(dim=(1, 2))) / 8 + 1
    return w, h, w * h / size**2


def test_crop_scale_of_outputs() -> None:
    """Crop areas read off the output images lie in crop_scale (up to rounding of w and h),
    equal the drawn boxes on the device, and have the same mean on both pipelines."""
    aug = SimCLRAugmentation(crop_scale=(0.25, 0.6), jitter_p=0.0, grayscale_p=0.0, flip_p=0.0)
    image = _ramp_image()
    n = N_VIEWS
    batch_aug = BatchAugmentation(aug, seed=0)
    params = batch_aug.sample(n, 32, 32)
    device = _unnormalise(batch_aug.apply(image[None].expand(n, -1, -1, -1), params), aug)
    cpu = _cpu_views(aug, image, n)
    estimates = {}
    for name, views in (("device", device), ("cpu", cpu)):
        w, h, area = _estimated_area(views)
        assert ((w + 0.5) * (h + 0.5) >= aug.crop_scale[0] * 1024).all(), name
        assert ((w - 0.5) * (h - 0.5) <= aug.crop_scale[1] * 1024).all(), name
        estimates[name] = area
    torch.testing.assert_close(estimates["device"], crop_area_fraction(params, 32, 32))
    _assert_same_distribution(estimates["device"], estimates["cpu"], "estimated crop area")


def _colour_stats(views: Tensor) -> dict[str, Tensor]:
    """Per view: mean intensity, per-channel spatial std (averaged), colourfulness."""
    return {
        "mean intensity": views.mean(dim=(1, 2, 3)),
        "channel std": views.std(dim=(2, 3)).mean(dim=1),
        "colourfulness": views.std(dim=1).mean(dim=(1, 2)),
    }


def test_colour_distribution_matches_cpu_pipeline(cifar_subset: Path) -> None:
    """Over views of one real CIFAR image (full CIFAR recipe), the mean and the spread of
    each view statistic agree between the device and the CPU pipeline: within 4 standard
    errors of the difference plus the CPU path's uint8 rounding bias."""
    aug = cifar_augmentation()
    image = _colourful_cifar_image(cifar_subset)
    n = N_VIEWS
    device = _colour_stats(_device_views(aug, image, n, seed=3))
    cpu = _colour_stats(_cpu_views(aug, image, n, seed=3))
    for name in device:
        a, b = device[name].double(), cpu[name].double()
        se_mean = math.sqrt(a.var().item() / n + b.var().item() / n)
        diff = abs(a.mean().item() - b.mean().item())
        assert diff <= SIGMAS * se_mean + UINT8_BIAS[name], f"{name}: means differ by {diff:.4f}"
        se_std = math.hypot(_se_std(a), _se_std(b))
        diff = abs(a.std().item() - b.std().item())
        assert diff <= SIGMAS * se_std + UINT8_BIAS[name], f"{name}: spreads differ by {diff:.4f}"


# ---------------------------------------------------------- 7. centre crop
@pytest.mark.parametrize(("height", "width"), [(32, 32), (40, 36), (41, 35)])
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_center_crop_normalize_matches_torchvision(
    height: int, width: int, dtype: torch.dtype
) -> None:
    """The batched clean transform equals torchvision's ``center_crop`` then normalise."""
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (4, 3, height, width), generator=g).to(torch.uint8)
    if dtype == torch.float32:
        images = images.float() / 255
    mean = torch.tensor([0.4, 0.5, 0.6]).view(1, 3, 1, 1)
    std = torch.tensor([0.2, 0.25, 0.3]).view(1, 3, 1, 1)
    out = center_crop_normalize(images, 32, mean, std)
    ref = []
    for image in images:
        x = TF.center_crop(image, [32, 32])
        x = x.float() / 255 if x.dtype == torch.uint8 else x
        ref.append(TF.normalize(x, mean.flatten().tolist(), std.flatten().tolist()))
    assert out.shape == (4, 3, 32, 32) and out.dtype == torch.float32
    assert (out - torch.stack(ref)).abs().max().item() < 1e-5
