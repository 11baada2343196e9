"""The CPU data path of ImageNet-100 at 224 px: ``python -m benchmarks views-224``.

CPU seconds (``time.process_time``, one intra-op thread, as in a loader worker) of what a
worker does per training image with ``augment_on: cpu`` and ``cache: none``: decode a
JPEG file ([`read_image`][ncl_lightning.data.decode.read_image]) and make two SimCLR views
of the ImageNet recipe ([`imagenet_augmentation`][ncl_lightning.data.imagenet_augmentation]:
crop 224, jitter, grayscale, blur p=0.5 with the 23-px kernel). Rows:

* the reference: the same pipeline with torchvision's ``GaussianBlur`` (a 2-D 23x23
  convolution whose tail taps are float32 denormals), without and with flush-to-zero;
* the pipeline as built now (separable blur without denormal taps, no flush-to-zero, as
  the loader workers run it); goal: under 15 ms per image;
* decoding alone to the 256-px uint8 source, the work of a worker with
  ``augment_on: device`` and ``decode_on: cpu``;
* one blur of a 224-px float view, σ on a grid over (0.1, 2): torchvision's 2-D
  convolution against the separable blur;
* the device pipeline's views run eagerly on the CPU
  ([`BatchAugmentation.apply_packed`][ncl_lightning.data.BatchAugmentation.apply_packed],
  ``DEVICE_BATCH`` images x 2 views from the 256-px uint8 source), with the bytes its
  tensors allocate per call (``torch.profiler``), a proxy of its GPU memory traffic.

The images are real: CIFAR-10 images of ``data/cifar10-real-subset`` (``NCL_BENCH_DATA``
overrides) upscaled
(bicubic) to 256x240 px and saved as JPEG (quality 90) in a temporary folder; without
that folder, scikit-image's or scipy's bundled sample photos (cropped and resized) if one
of them is installed. The same seed is set before each row, so every row blurs the same
views.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as TF

from benchmarks import Timing
from ncl_lightning.data.colour_ops import separable_gaussian_blur
from ncl_lightning.data.decode import read_image
from ncl_lightning.data.memory import FixedSizeUInt8
from ncl_lightning.data.transforms import SeparableGaussianBlur, imagenet_augmentation
from ncl_lightning.data.views import cpu_views
from ncl_lightning.foundation.errors import DataNotFoundError

DEFAULT_DATA = "data/cifar10-real-subset"  # as the throughput benchmark; NCL_BENCH_DATA overrides
IMAGES = 48  # JPEG files decoded and viewed per timed run
SIZE = (256, 240)  # width, height of the JPEGs: ImageNet's usual side after its resize
GOAL_MS = 15.0  # CPU per image, decode + two views
DEVICE_BATCH = 16  # images of the device-views row (x 2 views); allocations scale with it


def _photos(n: int) -> list[Image.Image]:
    """``n`` real RGB photos: CIFAR-10 images (every 37th), else bundled sample photos."""
    root = Path(os.environ.get("NCL_BENCH_DATA") or DEFAULT_DATA)
    files = sorted((root / "train").glob("*/*.png"))[::37][:n]
    if files:
        return [Image.open(path).convert("RGB") for path in files]
    samples: list[np.ndarray] = []
    try:
        from skimage import data as skdata

        samples = [skdata.astronaut(), skdata.chelsea(), skdata.coffee()]
    except ImportError:
        try:
            from scipy import datasets

            samples = [datasets.face()]
        except (ImportError, OSError):
            pass
    if not samples:
        raise DataNotFoundError(
            f"views-224 needs real photos: {root} is missing and neither "
            "scikit-image nor scipy's sample images are available"
        )
    photos = []
    for i in range(n):  # different crops of the few samples
        image = Image.fromarray(samples[i % len(samples)])
        w, h = image.size
        step = (i // len(samples)) * 7 % max(1, min(w, h) // 4)
        photos.append(image.crop((step, step, w - step, h - step)))
    return photos


def write_jpegs(folder: Path, n: int | None = None) -> list[str]:
    """Save ``n`` (``None``: ``IMAGES``) real photos upscaled to ``SIZE`` as JPEG files
    in ``folder``."""
    paths = []
    for i, photo in enumerate(_photos(IMAGES if n is None else n)):
        path = folder / f"{i:03d}.jpg"
        photo.resize(SIZE, Image.Resampling.BICUBIC).save(path, "JPEG", quality=90)
        paths.append(str(path))
    return paths


def with_torchvision_blur(pipeline: v2.Compose) -> v2.Compose:
    """``pipeline`` with its blur replaced by torchvision's ``GaussianBlur`` (same kernel
    side and σ range): the CPU pipeline before the separable blur."""
    for op in pipeline.transforms:
        inner = getattr(op, "transforms", [])
        for i, sub in enumerate(inner):
            if isinstance(sub, SeparableGaussianBlur):
                inner[i] = v2.GaussianBlur(sub.kernel_size, sigma=sub.sigma)
    return pipeline


def cpu_seconds(fn: Callable[[], Any], repeats: int) -> float:
    """Median CPU seconds of ``fn()`` over ``repeats`` calls after one warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    return float(np.median(times))


def _views_of(paths: list[str], views: Callable[[Any], Any], flush: bool) -> Callable[[], None]:
    def run() -> None:
        torch.manual_seed(0)  # every row blurs the same views
        torch.set_flush_denormal(flush)
        try:
            for path in paths:
                views(read_image(path))
        finally:
            torch.set_flush_denormal(False)  # this process' default

    return run


def _blur_rows(path: str, kernel: int, repeats: int) -> list[Timing]:
    """CPU seconds per 100 blurs of one 224-px view, σ on 20 points of (0.1, 2)."""
    view = v2.functional.to_dtype(
        v2.functional.pil_to_tensor(read_image(path).resize((224, 224))), torch.float32, True
    )
    sigmas = torch.linspace(0.1, 2.0, 20).tolist()
    blurs = {
        "torchvision GaussianBlur (2-D)": lambda s: TF.gaussian_blur(
            view, [kernel, kernel], [s, s]
        ),
        "separable blur": lambda s: separable_gaussian_blur(view, s, kernel),
    }
    rows = []
    for what, blur in blurs.items():
        seconds = cpu_seconds(lambda b=blur: [b(s) for s in sigmas], repeats) / len(sigmas)
        rows.append(
            Timing(
                f"one blur of a 224-px view ({kernel}-px kernel), per 100: {what}",
                100 * seconds,
                note=f"{1000 * seconds:.1f} ms CPU per blur",
            )
        )
    return rows


def _device_row(paths: list[str], repeats: int) -> Timing:
    """CPU seconds and bytes allocated per call of the device views (eager)."""
    from torch.profiler import ProfilerActivity, profile

    from ncl_lightning.data import BatchAugmentation

    source = FixedSizeUInt8(256)
    images = torch.stack([source(read_image(paths[i % len(paths)])) for i in range(DEVICE_BATCH)])
    aug = BatchAugmentation(imagenet_augmentation(), seed=0)
    packed = aug.draw(images, 2)
    seconds = cpu_seconds(lambda: aug.apply_packed(images, packed, 2), repeats)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        aug.apply_packed(images, packed, 2)
    allocated = sum(max(event.self_cpu_memory_usage, 0) for event in prof.events()) / 1e9
    return Timing(
        f"device views, eager on the CPU: {DEVICE_BATCH} images x 2 views at 224 px",
        seconds,
        note=f"{allocated:.2f} GB allocated per call ({allocated * 128 / DEVICE_BATCH:.1f} GB "
        "at 128 x 2)",
    )


def run(repeats: int) -> list[Timing]:
    """Time the rows described in the module docstring; ``seconds`` are CPU seconds per
    100 images, the note gives milliseconds per image."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a loader worker's setting
    try:
        with tempfile.TemporaryDirectory() as tmp:
            paths = write_jpegs(Path(tmp))
            aug = imagenet_augmentation()
            before = cpu_views(with_torchvision_blur(aug.build()), 2)
            after = cpu_views(aug.build(), 2)
            source = FixedSizeUInt8(256)
            cases: list[tuple[str, Callable[[], None], float | None]] = [
                ("torchvision GaussianBlur (before)", _views_of(paths, before, False), None),
                ("torchvision GaussianBlur, flush-to-zero", _views_of(paths, before, True), None),
                ("separable blur (now)", _views_of(paths, after, False), GOAL_MS),
                ("decode only, to the 256-px uint8 source", _views_of(paths, source, True), None),
            ]
            rows = [*_blur_rows(paths[0], aug.blur_kernel_side, repeats)]
            for what, fn, goal_ms in cases:
                per_image = cpu_seconds(fn, repeats) / len(paths)
                views = "" if "decode only" in what else " + 2 views"
                rows.append(
                    Timing(
                        f"decode{views} at 224 px, per 100 images: {what}",
                        100 * per_image,
                        None if goal_ms is None else goal_ms / 10,
                        f"{1000 * per_image:.1f} ms CPU per image",
                    )
                )
            return [*rows[2:], *rows[:2], _device_row(paths, repeats)]
    finally:
        torch.set_num_threads(threads)
