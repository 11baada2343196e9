"""Training-step time of BayesNCL against NCL on the same batch (goal: within 10 %).

One step = encode two views, the objective (gathered InfoNCE, plus the gate's KL for
BayesNCL), backward and an optimiser step with the method's own parameter groups. Both
methods share the backbone architecture and the batch; their steps are timed alternately
so that drift of the machine affects both alike.
"""

from __future__ import annotations

import statistics
import time

import torch

from benchmarks import Timing
from ncl_lightning.foundation.progress import Progress
from ncl_lightning.methods import NCL, BayesNCL
from ncl_lightning.nn import ResNet
from ncl_lightning.optim import LARS

BATCH_SIZE = 256
IMAGE_SIZE = 32


def _stepper(method: NCL, views: list[torch.Tensor]):
    optimizer = LARS(method.param_groups(), lr=0.3, weight_decay=1e-4)
    method.train()

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        loss = method.objective([method.encode(v) for v in views])
        loss.backward()
        optimizer.step()

    return step


def run(
    repeats: int = 3, batch_size: int = BATCH_SIZE, image_size: int = IMAGE_SIZE
) -> list[Timing]:
    """Median step seconds of NCL and BayesNCL (ResNet-18 CIFAR stem, paper heads)."""
    torch.manual_seed(0)
    views = [torch.randn(batch_size, 3, image_size, image_size) for _ in range(2)]
    heads = {"proj_hidden_dim": 2048, "proj_output_dim": 256, "num_classes": 0}
    steps = {
        "NCL": _stepper(NCL(ResNet(18, "cifar"), **heads), views),
        "BayesNCL": _stepper(BayesNCL(ResNet(18, "cifar"), **heads), views),
    }
    times: dict[str, list[float]] = {name: [] for name in steps}
    progress = Progress(1 + repeats, "step")
    with progress.unit("warm-up step of each method"):
        for step in steps.values():
            step()
    for r in range(repeats):
        with progress.unit(f"timed round {r + 1}/{repeats}: one step of each method"):
            for name, step in steps.items():
                start = time.perf_counter()
                step()
                times[name].append(time.perf_counter() - start)
    progress.finish()
    ncl, bayes = (statistics.median(times[n]) for n in ("NCL", "BayesNCL"))
    what = f"ResNet-18, {batch_size} x 2 views of {image_size}x{image_size}, one training step"
    return [
        Timing(f"NCL: {what}", ncl),
        Timing(
            f"BayesNCL: {what}",
            bayes,
            goal=1.10 * ncl,
            note=f"ratio {bayes / ncl:.3f} (goal <= 1.10)",
        ),
    ]
