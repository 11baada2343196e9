"""BatchAugmentation (the SimCLR views on whole batches) against torchvision.

Every op is compared with torchvision's per-image functional in a slow Python loop, the
parameter sampler with torchvision's own ``RandomResizedCrop.get_params`` and the configured
probabilities (the output images against the CPU pipeline, ``SimCLRAugmentation.build()``:
``test_batch_augmentation_outputs.py``). Tolerances of rates are four binomial standard
errors; tolerances of means are four standard errors of the difference.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch
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
    crop_area_fraction,
    gaussian_blur,
    sample_crops,
)
from tests.data.augmentation_helpers import (
    SIGMAS,
    assert_rate,
    assert_same_distribution,
    rgb_batch,
    unnormalise,
)


@pytest.mark.parametrize("channels", [3, 1])
@pytest.mark.parametrize(
    ("ours", "theirs"),
    [(adjust_brightness, TF.adjust_brightness), (adjust_contrast, TF.adjust_contrast)],
)
def test_brightness_contrast_match_torchvision(ours, theirs, channels: int) -> None:
    """Per-sample brightness/contrast equal torchvision's per-image op (RGB and 1 channel)."""
    x = rgb_batch(8, 12, seed=0, channels=channels)
    factor = torch.linspace(0.0, 2.0, 8)
    out = ours(x.clone(), factor)
    ref = torch.stack([theirs(x[i], float(factor[i])) for i in range(len(x))])
    assert (out - ref).abs().max().item() < 1e-5


def test_saturation_matches_torchvision() -> None:
    """Per-sample saturation equals torchvision's ``adjust_saturation`` image by image."""
    x = rgb_batch(8, 12, seed=1)
    factor = torch.linspace(0.0, 2.0, 8)
    out = adjust_saturation(x.clone(), factor)
    ref = torch.stack([TF.adjust_saturation(x[i], float(factor[i])) for i in range(len(x))])
    assert (out - ref).abs().max().item() < 1e-5


def test_hue_matches_torchvision() -> None:
    """Per-sample hue rotation equals torchvision's ``adjust_hue`` over the whole range."""
    x = rgb_batch(9, 12, seed=2)
    factor = torch.linspace(-0.5, 0.5, 9)
    out = adjust_hue(x.clone(), factor)
    ref = torch.stack([TF.adjust_hue(x[i], float(factor[i])) for i in range(len(x))])
    assert (out - ref).abs().max().item() < 1e-5


def test_gaussian_blur_matches_torchvision() -> None:
    """Per-sample sigma blur equals torchvision's ``gaussian_blur`` (reflect padding)."""
    x = rgb_batch(6, 16, seed=3)
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
    assert_same_distribution(fraction, ref[:, 2] * ref[:, 3] / area, "area fraction")
    assert_same_distribution(w / h, ref[:, 3] / ref[:, 2], "aspect ratio")
    assert_same_distribution(top + h / 2, ref[:, 0] + ref[:, 2] / 2, "centre row")
    assert_same_distribution(left + w / 2, ref[:, 1] + ref[:, 3] / 2, "centre column")


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
    assert_rate(p.flip, aug.flip_p, "flip")
    assert_rate(p.gray, aug.grayscale_p, "grayscale")
    assert_rate(p.jitter, aug.jitter_p, "jitter")
    assert_rate(p.blur_sigma > 0, aug.blur_p, "blur")
    assert_rate(p.solarize, aug.solarize_p, "solarize")
    assert_rate(p.gray & p.jitter, aug.grayscale_p * aug.jitter_p, "grayscale and jitter")
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
        assert_rate(p.order[:, 0] == op, 0.25, f"op {op} first")
        assert_rate(p.order[:, 3] == op, 0.25, f"op {op} last")


def test_view_params_follow_config_switches() -> None:
    """Rotation is U(-r, r); jitter never happens with jitter_p=0 or all strengths 0;
    the flip rate follows flip_p (digits: never)."""
    n = 20000
    digits = sample_view_params(digits_augmentation(), n, 8, 8, torch.Generator().manual_seed(1))
    assert (digits.angle.abs() <= 10).all() and not digits.flip.any()
    assert abs(digits.angle.mean().item()) <= SIGMAS * 20 / math.sqrt(12 * n)
    assert abs(digits.angle.std().item() - 20 / math.sqrt(12)) < 0.1
    assert_rate(digits.jitter, 0.8, "digits jitter")
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
    assert_rate(flips, 0.2, "flip_p=0.2")


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
        raw = unnormalise(v, aug)
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
    assert batch_aug.blur_kernel == aug.blur_kernel_side == 13  # ±3 σ_max for σ_max = 2
    views = batch_aug(images, n_views=2)
    for v in views:
        assert v.shape == (8, 3, 48, 48) and v.dtype == torch.float32
        raw = unnormalise(v, aug)
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
