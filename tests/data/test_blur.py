"""The Gaussian blur of the CIFAR views (NCL/BayesNCL releases: p 0.5, σ ~ U(0.1, 2) at 32 px).

The device blur is compared with torchvision's ``gaussian_blur`` on real CIFAR images, the
blur rate and σ distribution of the device pipeline with the CPU pipeline's on output
images (every other op off), and the kernel rule with an un-truncated Gaussian written
here: the 3-px kernel that ~10 % of a 32 px side gives cannot express σ = 2.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from torch import Tensor
from torchvision import tv_tensors
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as TF

from ncl_lightning.data import (
    BatchAugmentation,
    SimCLRAugmentation,
    cifar_augmentation,
    imagenet_augmentation,
)
from ncl_lightning.data.batch_augmentation import gaussian_blur
from ncl_lightning.data.colour_ops import (
    _gaussian_kernels,
    gaussian_taps,
    separable_gaussian_blur,
)
from ncl_lightning.data.transforms import SeparableGaussianBlur
from tests.data.augmentation_helpers import (
    N_VIEWS,
    SIGMAS,
    assert_rate,
    assert_same_distribution,
    colourful_cifar_image,
    cpu_views,
    device_views,
    read_rgb,
)

SIGMA_GRID = torch.arange(0.0, 2.101, 0.01)  # σ candidates of the output-image fit


def _cifar_images(root: Path, n: int) -> Tensor:
    """Float ``[n, 3, 32, 32]`` in [0, 1]: every 50th real CIFAR training image."""
    files = sorted((root / "train").glob("*/*.png"))[::50][:n]
    return torch.stack([read_rgb(path) for path in files]).float() / 255


def _untruncated_blur(x: Tensor, sigma: float) -> Tensor:
    """Slow reference: separable Gaussian blur of ``[C, S, S]`` over ±8 σ (tail mass
    below 1e-15) with reflect boundaries, as a dense ``[S, S]`` operator per axis."""
    side = x.shape[-1]
    radius = math.ceil(8 * sigma)
    taps = [math.exp(-0.5 * (t / sigma) ** 2) for t in range(-radius, radius + 1)]
    total = sum(taps)
    op = torch.zeros(side, side, dtype=torch.float64)
    for i in range(side):
        for t, weight in zip(range(-radius, radius + 1), taps, strict=True):
            j = i + t
            while not 0 <= j < side:  # reflect without repeating the edge pixel
                j = -j if j < 0 else 2 * (side - 1) - j
            op[i, j] += weight / total
    return (op @ x.double() @ op.T).float()


def test_device_blur_matches_torchvision_on_cifar(cifar_subset: Path) -> None:
    """Per-sample σ blur with the CIFAR kernel (13 px) equals torchvision's per image."""
    images = _cifar_images(cifar_subset, 8)
    sigma = torch.linspace(0.1, 2.0, 8)
    kernel = cifar_augmentation().blur_kernel_side
    out = gaussian_blur(images, sigma, kernel)
    ref = torch.stack(
        [
            TF.gaussian_blur(x, [kernel, kernel], [float(s), float(s)])
            for x, s in zip(images, sigma, strict=True)
        ]
    )
    assert (out - ref).abs().max().item() < 1e-5


def _kernel_errors(images: Tensor, sigma: float) -> dict[int, float]:
    """Largest pixel error, against the un-truncated reference, of each kernel size."""
    ref = torch.stack([_untruncated_blur(x, sigma) for x in images])
    sigmas = torch.full((len(images),), sigma)
    return {k: (gaussian_blur(images, sigmas, k) - ref).abs().max().item() for k in (3, 13)}


def test_sigma_2_needs_the_wide_kernel(cifar_subset: Path) -> None:
    """σ = 2 at 32 px: the 13-px kernel (±3 σ) is within 0.01 of an un-truncated Gaussian
    on real images; the 3-px kernel of the old ~10 %-of-side rule, nearly a box filter, is
    more than 5 times further off."""
    images = _cifar_images(cifar_subset, 16)
    errors = _kernel_errors(images, 2.0)
    assert errors[13] < 0.01, errors
    assert errors[3] > 0.05 and errors[3] > 5 * errors[13], errors
    # At σ = 0.5 both kernels hold the Gaussian (the rule only widens where it must).
    small = _kernel_errors(images, 0.5)
    assert max(small.values()) < 0.01, small


def _fitted_sigma(views: Tensor, image: Tensor, kernel: int) -> Tensor:
    """``[N]`` σ of the grid whose blur of ``image`` is nearest each view (0: the image)."""
    sigmas = SIGMA_GRID[1:].tolist()
    blurred = [TF.gaussian_blur(image, [kernel, kernel], [s, s]) for s in sigmas]
    templates = torch.stack([image, *blurred]).flatten(1)
    nearest = torch.cdist(views.flatten(1).double(), templates.double()).argmin(dim=1)
    return SIGMA_GRID[nearest]


def test_blur_rate_and_sigma_of_outputs(cifar_subset: Path) -> None:
    """With the whole image as crop and every other op off, each view is the image blurred
    with some σ. Fitted σ on both pipelines: blurred (σ >= 0.3, where a blur is visible) in
    about 0.5 * 1.7 / 1.9 of the views, σ uniform on [0.3, 2] there, the same distribution
    on the device as on the CPU."""
    aug = SimCLRAugmentation(
        crop_scale=(1.0, 1.0), crop_ratio=(1.0, 1.0), jitter_p=0.0, grayscale_p=0.0,
        flip_p=0.0, blur_p=0.5, blur_sigma=(0.1, 2.0),
    )  # fmt: skip
    image = colourful_cifar_image(cifar_subset)
    low, high = aug.blur_sigma
    visible = {}
    for name, make in (("device", device_views), ("cpu", cpu_views)):
        views = make(aug, image, N_VIEWS, seed=1)
        sigma = _fitted_sigma(views, image.float() / 255, aug.blur_kernel_side)
        assert_rate(sigma >= 0.3, aug.blur_p * (high - 0.3) / (high - low), f"{name} blur")
        on = visible[name] = sigma[sigma >= 0.3]
        assert high - 0.05 < on.max() <= high + 0.01, f"{name}: largest σ {on.max():.3f}"
        se = (high - 0.3) / math.sqrt(12 * len(on))
        mean = on.mean().item()
        assert abs(mean - (high + 0.3) / 2) <= SIGMAS * se + 0.005, f"{name}: mean σ {mean:.3f}"
    assert_same_distribution(visible["device"], visible["cpu"], "blur σ")


def test_device_blur_params_match_config() -> None:
    """The device pipeline draws σ ~ U(blur_sigma) for a blur_p share of the views and
    uses the configured kernel (the explicit ``blur_kernel`` when given)."""
    aug = cifar_augmentation()
    params = BatchAugmentation(aug, seed=0).sample(20000, 32, 32)
    assert_rate(params.blur_sigma > 0, 0.5, "device blur")
    on = params.blur_sigma[params.blur_sigma > 0]
    assert on.min() >= 0.1 and on.max() <= 2.0
    assert abs(on.mean().item() - 1.05) <= SIGMAS * 1.9 / math.sqrt(12 * len(on))
    assert BatchAugmentation(aug).blur_kernel == 13
    old = SimCLRAugmentation(blur_p=0.5, blur_kernel=3)
    assert BatchAugmentation(old).blur_kernel == 3


def _real_224(root: Path, n: int) -> Tensor:
    """Float ``[n, 3, 224, 224]``: real CIFAR images upscaled (bicubic) to ImageNet size."""
    images = _cifar_images(root, n)
    return TF.resize(images, [224, 224], antialias=True).clamp(0, 1)


def test_separable_blur_matches_torchvision_on_real_224px_images(cifar_subset: Path) -> None:
    """The CPU pipeline's blur (two 1-D passes over the taps above ``TAP_FLOOR``) equals
    torchvision's 2-D ``gaussian_blur`` within 5e-6 on real 224-px images, for σ over the
    whole range (the denormal tail is at σ ~ 0.8) and both kernel sides of the presets."""
    images = _real_224(cifar_subset, 3)
    for kernel in (23, 13):
        for sigma in (0.1, 0.3, 0.5, 0.8, 0.85, 1.0, 1.5, 2.0):
            ref = TF.gaussian_blur(images, [kernel, kernel], [sigma, sigma])
            out = separable_gaussian_blur(images, sigma, kernel)
            err = (out - ref).abs().max().item()
            assert err < 5e-6, (kernel, sigma, err)


def test_separable_blur_draws_sigma_as_torchvision(cifar_subset: Path) -> None:
    """Same global-generator draw of σ as ``v2.GaussianBlur``: with one seed both give the
    same image (so the CPU views' blur distribution is torchvision's), and they consume the
    generator alike (the next draw is the same)."""
    image = tv_tensors.Image(_real_224(cifar_subset, 1)[0])
    ours, theirs = SeparableGaussianBlur(23, (0.1, 2.0)), v2.GaussianBlur(23, (0.1, 2.0))
    for seed in range(4):
        torch.manual_seed(seed)
        a, after_a = ours(image), torch.rand(1)
        torch.manual_seed(seed)
        b, after_b = theirs(image), torch.rand(1)
        assert isinstance(a, tv_tensors.Image)
        assert (a - b).abs().max().item() < 5e-6 and torch.equal(after_a, after_b)
    pipeline = imagenet_augmentation().build()
    assert any(isinstance(op, SeparableGaussianBlur) for op in _ops(pipeline))
    assert not any(type(op) is v2.GaussianBlur for op in _ops(pipeline))


def _ops(transform: object) -> list[object]:
    """Every transform nested in ``Compose`` / ``RandomApply``."""
    inner = getattr(transform, "transforms", None)
    return [transform] if inner is None else [op for t in inner for op in _ops(t)]


def test_blur_taps_have_no_denormals() -> None:
    """Neither pipeline's kernel holds a float32 denormal (the cause of the ~70 ms CPU blur);
    the tail cut changes no tap by more than 1e-18 against the exact normalised Gaussian."""
    sigma = torch.linspace(0.05, 3.0, 600)
    for kernel in (3, 13, 23, 31):
        taps = _gaussian_kernels(sigma, kernel)
        assert bool(((taps == 0) | (taps >= torch.finfo(torch.float32).tiny)).all())
        pos = torch.arange(kernel, dtype=torch.float64) - kernel // 2
        exact = torch.exp(-0.5 * (pos / sigma.double()[:, None]) ** 2)
        exact = exact / exact.sum(dim=1, keepdim=True)
        assert (taps.double() - exact).abs().max().item() < 1e-6
        for s in (0.1, 0.8, 2.0):
            kept = gaussian_taps(s, kernel)
            assert len(kept) % 2 == 1 and min(kept) > 0
