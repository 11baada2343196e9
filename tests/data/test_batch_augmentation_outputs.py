"""BatchAugmentation's output images against the CPU pipeline and torchvision, in
distribution: grayscale and flip rates, crop scale, colour statistics, and the clean
centre crop. Tolerances are four standard errors (see ``augmentation_helpers``)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from torch import Tensor
from torchvision.transforms.v2 import functional as TF

from ncl_lightning.data import (
    BatchAugmentation,
    SimCLRAugmentation,
    cifar_augmentation,
)
from ncl_lightning.data.batch_augmentation import (
    center_crop_normalize,
    crop_area_fraction,
)
from tests.data.augmentation_helpers import (
    N_VIEWS,
    SIGMAS,
    UINT8_BIAS,
    assert_rate,
    assert_same_distribution,
    colourful_cifar_image,
    cpu_views,
    device_views,
    is_gray,
    ramp_image,
    std_error,
    unnormalise,
)


@pytest.mark.parametrize("pipeline", ["device", "cpu"])
def test_grayscale_fraction_of_outputs(cifar_subset: Path, pipeline: str) -> None:
    """On a colourful real image, about grayscale_p = 0.2 of the CIFAR views are gray."""
    aug = cifar_augmentation()
    image = colourful_cifar_image(cifar_subset)
    make = device_views if pipeline == "device" else cpu_views
    views = make(aug, image, N_VIEWS)
    assert_rate(is_gray(views), aug.grayscale_p, f"{pipeline} grayscale")


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
        blur_p=0.0,
        flip_p=flip_p,
    )
    image = ramp_image()
    if pipeline == "device":
        views = device_views(aug, image, N_VIEWS)
    else:
        views = cpu_views(aug, image, N_VIEWS, pil=pipeline == "cpu-pil")
    plain = image.float() / 255
    flipped = (views[:, 0, :, 0] > views[:, 0, :, -1]).all(dim=1)
    expected = torch.where(flipped[:, None, None, None], plain.flip(-1), plain)
    assert (views - expected).abs().max().item() < 1e-5
    assert_rate(flipped, flip_p, f"{pipeline} flip")


def _estimated_area(views: Tensor, size: int = 32) -> tuple[Tensor, Tensor, Tensor]:
    """Crop widths, heights and area fractions read off the red (x) and green (y) ramps of
    ``ramp_image``: bilinear upsampling keeps the crop's outer pixel centres, so a crop
    ``w`` pixels wide spans ``8 (w - 1)`` red levels."""
    levels = (views * 255).round()
    w = (levels[:, 0].amax(dim=(1, 2)) - levels[:, 0].amin(dim=(1, 2))) / 8 + 1
    h = (levels[:, 1].amax(dim=(1, 2)) - levels[:, 1].amin(dim=(1, 2))) / 8 + 1
    return w, h, w * h / size**2


def test_crop_scale_of_outputs() -> None:
    """Crop areas read off the output images lie in crop_scale (up to rounding of w and h),
    equal the drawn boxes on the device, and have the same mean on both pipelines."""
    aug = SimCLRAugmentation(
        crop_scale=(0.25, 0.6), jitter_p=0.0, grayscale_p=0.0, blur_p=0.0, flip_p=0.0
    )
    image = ramp_image()
    n = N_VIEWS
    batch_aug = BatchAugmentation(aug, seed=0)
    params = batch_aug.sample(n, 32, 32)
    device = unnormalise(batch_aug.apply(image[None].expand(n, -1, -1, -1), params), aug)
    cpu = cpu_views(aug, image, n)
    estimates = {}
    for name, views in (("device", device), ("cpu", cpu)):
        w, h, area = _estimated_area(views)
        assert ((w + 0.5) * (h + 0.5) >= aug.crop_scale[0] * 1024).all(), name
        assert ((w - 0.5) * (h - 0.5) <= aug.crop_scale[1] * 1024).all(), name
        estimates[name] = area
    torch.testing.assert_close(estimates["device"], crop_area_fraction(params, 32, 32))
    assert_same_distribution(estimates["device"], estimates["cpu"], "estimated crop area")


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
    image = colourful_cifar_image(cifar_subset)
    n = N_VIEWS
    device = _colour_stats(device_views(aug, image, n, seed=3))
    cpu = _colour_stats(cpu_views(aug, image, n, seed=3))
    for name in device:
        a, b = device[name].double(), cpu[name].double()
        se_mean = math.sqrt(a.var().item() / n + b.var().item() / n)
        diff = abs(a.mean().item() - b.mean().item())
        assert diff <= SIGMAS * se_mean + UINT8_BIAS[name], f"{name}: means differ by {diff:.4f}"
        se_std = math.hypot(std_error(a), std_error(b))
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
