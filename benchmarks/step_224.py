"""The ImageNet-100 step at 224 px, host against device: ``python -m benchmarks step-224``.

Is the full training step bound by the GPU once the images are large? ResNet-18 with the
ImageNet stem and the ImageNet-100 configs' projector (4096-512, no batch norm), batch 128
of two 224 px views made on the device (``augment_on: device``), bf16-mixed and
channels_last (``throughput``'s switches), through ``Trainer.fit`` for each selected
method (``NCL_BENCH_METHODS``, default NCL) and step mode (``NCL_BENCH_MODES``). The
images are the CIFAR-10 subset of ``NCL_BENCH_DATA`` held at 256 px and cropped to 224:
no ImageNet images are here, and the step's work (views, network, loss, optimiser) depends
on the sizes, not on the pictures.

Per run, from a [`StepClock`][benchmarks.clock.StepClock]: device ms per step
over a steady window (CUDA events, read after it), host ms per step over the same window,
and for a few isolated steps (a synchronize before each) the host ms to queue the step
against the device ms to finish it: host < device means the step is GPU-bound. On a CPU
host and device are the same clock and there are no isolated steps, and a 224 px
ResNet-18 step takes tens of seconds: the benchmark runs there only with
``NCL_BENCH_224_ON_CPU=1`` (else it returns one row saying so).
"""

from __future__ import annotations

import os
from typing import Any

import torch

from benchmarks import Timing
from benchmarks.throughput import (
    announce,
    bench_data,
    build_method,
    failure,
    methods,
    modes,
    step_note,
    switches,
    timed_fit,
)
from ncl_lightning.foundation.progress import Progress
from ncl_lightning.methods import CL
from ncl_lightning.nn import ResNet

BATCH_SIZE = 128
IMAGE_SIZE = 224


def make_model(
    name: str, settings: dict[str, Any], num_classes: int = 10, step_mode: str = "eager"
) -> CL:
    """``name`` as in the ImageNet-100 configs (ResNet-18 ImageNet stem, 4096-512)."""
    return build_method(
        name, ResNet(18, "imagenet"), settings, num_classes, BATCH_SIZE, step_mode,
        proj_hidden_dim=4096, proj_output_dim=512, proj_batch_norm=False,
    )  # fmt: skip


def run(repeats: int = 1) -> list[Timing]:
    """One row per method and mode (``repeats`` is not used: one run each)."""
    if not torch.cuda.is_available() and os.environ.get("NCL_BENCH_224_ON_CPU") != "1":
        return [
            Timing(
                f"ResNet-18 {IMAGE_SIZE} px step, host against device",
                float("nan"),
                note="not run: no GPU here (NCL_BENCH_224_ON_CPU=1 runs it on the CPU)",
            )
        ]
    settings = switches()
    label = ", ".join(f"{k}={v}" for k, v in settings.items())
    configs = [(name, mode) for name in methods(("NCL",)) for mode in modes()]
    progress = Progress(len(configs), "step-224")
    rows = []
    for name, mode in configs:
        what = (
            f"{name}, {mode} step, ResNet-18 {IMAGE_SIZE} px, batch {BATCH_SIZE} x 2 device "
            f"views ({label})"
        )
        with progress.unit(f"{name}, {mode} step, {IMAGE_SIZE} px"):
            try:
                torch.manual_seed(0)
                datamodule = bench_data("device", BATCH_SIZE, image_size=IMAGE_SIZE)
                model = make_model(name, settings, datamodule.num_classes, step_mode=mode)
                result = timed_fit(model, datamodule, settings, mode)
            except Exception as err:
                rows.append(failure(what, err))
                continue
            announce("step-224", what, result)
        rate = BATCH_SIZE / result.seconds
        rows.append(Timing(what, result.seconds, note=f"{rate:.1f} img/s; {step_note(result)}"))
    progress.finish()
    return rows


__all__ = ["make_model", "run"]
