"""Shared statistics and view makers of the batched-augmentation tests: binomial and
mean tolerances in standard errors, views from the device and the CPU pipelines."""

from __future__ import annotations

import functools
import math
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch import Tensor

from ncl_lightning.data import (
    BatchAugmentation,
    SimCLRAugmentation,
)
from ncl_lightning.data.memory import to_pil

SIGMAS = 4.0  # tolerance of every statistical comparison, in standard errors
N_VIEWS = 2000  # views per statistic measured on output images
# The CPU pipeline rounds to uint8 after the crop-resize and after each of the four PIL
# jitter ops, and PIL truncates: each rounding lowers pixel values by at most 0.5 / 255 on
# average. That shifts a mean intensity by up to 5 * 0.5 / 255 but a spread (a standard
# deviation over pixels or channels) only through the rounding noise, well below 0.5 / 255.
UINT8_BIAS = {"mean intensity": 5 * 0.5 / 255, "channel std": 0.5 / 255, "colourfulness": 0.5 / 255}


def rate_tol(p: float, n: int) -> float:
    return SIGMAS * math.sqrt(p * (1 - p) / n)


def assert_rate(flags: Tensor, p: float, what: str) -> None:
    rate = flags.float().mean().item()
    assert abs(rate - p) <= rate_tol(p, flags.numel()), f"{what}: rate {rate:.4f}, expected {p}"


def assert_same_distribution(sample: Tensor, reference: Tensor, what: str) -> None:
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


def std_error(x: Tensor) -> float:
    """Standard error of the sample standard deviation (delta method, any distribution)."""
    x = x.double()
    s2 = x.var().item()
    m4 = ((x - x.mean()) ** 4).mean().item()
    return math.sqrt(max(m4 - s2**2, 0.0) / len(x)) / (2 * math.sqrt(s2))


def unnormalise(x: Tensor, aug: SimCLRAugmentation) -> Tensor:
    mean = torch.tensor(aug.mean).view(1, -1, 1, 1)
    std = torch.tensor(aug.std).view(1, -1, 1, 1)
    return x * std + mean


def device_views(aug: SimCLRAugmentation, image: Tensor, n: int, seed: int = 0) -> Tensor:
    """``n`` un-normalised device views of one uint8 image ``[C, H, W]``."""
    batch = image[None].expand(n, -1, -1, -1)
    return unnormalise(BatchAugmentation(aug, seed=seed)(batch, n_views=1)[0], aug)


def cpu_views(
    aug: SimCLRAugmentation, image: Tensor, n: int, seed: int = 0, pil: bool = True
) -> Tensor:
    """``n`` un-normalised views of one uint8 image by the torchvision CPU pipeline, fed a
    PIL image (as the loaders do) or the uint8 tensor."""
    transform = aug.build()
    source = to_pil(image) if pil else image
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as in a loader worker: one image is too small to split
    try:
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            views = torch.stack([transform(source) for _ in range(n)])
    finally:
        torch.set_num_threads(threads)
    return unnormalise(views, aug)


def is_gray(views: Tensor) -> Tensor:
    """``[N]`` bool: every pixel has its three channels equal within 2/255."""
    return (views.amax(1) - views.amin(1)).amax(dim=(1, 2)) <= 2.0 / 255


def ramp_image(size: int = 32) -> Tensor:
    """uint8 ``[3, S, S]``: red = 8 * column, green = 8 * row, blue constant."""
    ramp = torch.arange(size, dtype=torch.uint8) * 8
    image = torch.full((3, size, size), 128, dtype=torch.uint8)
    image[0] = ramp[None, :]
    image[1] = ramp[:, None]
    return image


def read_rgb(path: Path) -> Tensor:
    array = np.asarray(Image.open(path).convert("RGB"))
    return torch.from_numpy(array.copy()).permute(2, 0, 1).contiguous()


@functools.lru_cache(maxsize=1)
def colourful_cifar_image(root: Path) -> Tensor:
    """The real CIFAR training image (of every tenth) whose least colourful pixel is the most
    colourful: no crop of it is gray unless the pipeline made it gray."""
    files = sorted((root / "train").glob("*/*.png"))[::10]
    best, best_spread = None, -1
    for path in files:
        image = read_rgb(path).int()
        spread = int((image.amax(0) - image.amin(0)).min())
        if spread > best_spread:
            best, best_spread = path, spread
    assert best is not None and best_spread >= 20, "no colourful image in the CIFAR subset"
    return read_rgb(best)


def rgb_batch(n: int, size: int, seed: int, channels: int = 3) -> Tensor:
    """Float ``[n, C, S, S]`` on the uint8 grid (so channel ties and gray pixels occur)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 256, (n, channels, size, size), generator=g).float() / 255
    if channels == 3:
        x[0] = x[0, :1].expand(3, -1, -1)  # a gray image
        x[1, 1] = x[1, 0]  # red == green everywhere
    return x


# ---------------------------------------------------------------- 1. colour ops
