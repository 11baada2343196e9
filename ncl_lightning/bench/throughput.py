"""Training throughput against the network's limit: ``python -m ncl_lightning.bench throughput``.

For CL, NCL and BayesNCL (ResNet-18 with the CIFAR stem, projector 2048-256, batch 256 of
32x32 images, two views) and for each augmentation pipeline (``device``: batched on the
training device; ``cpu``: torchvision in the loader workers), it measures

(a) images/s of the complete training step, through ``Trainer.fit`` on the real CIFAR-10
    images beside the project (decoded once into memory): loading, augmentation, forward,
    the loss with gathering, backward, the LARS step, the online probe and kNN bank,
    logging (a CSV logger, every 10 steps), timed between the ends of training batches
    after warm-up steps; the median step over ``--repeats`` rounds alternating the methods;
(b) images/s of the bare backbone + projector forward and backward on pre-made tensors of
    the same shape (two views of 256), with the same precision and memory format;

and prints both and the ratio (a)/(b) (goal >= 0.9), and NCL's and BayesNCL's (a)
relative to CL's (NCL's goal: within 2 %). On a GPU it also reports the peak memory of
(a). The switches default to the paper configs' choice (bf16-mixed, channels_last, no
torch.compile); set ``NCL_BENCH_PRECISION`` / ``NCL_BENCH_CHANNELS_LAST`` /
``NCL_BENCH_COMPILE`` to measure others (docs/performance.md has the comparison).
``NCL_BENCH_DATA`` points at another ImageFolder of 32x32 images. Each training run is
announced on stderr (``[throughput k/N] ...``); ``python -m ncl_lightning.bench`` keeps
Lightning's banners quiet during them (``--verbose`` shows them).
"""

from __future__ import annotations

import itertools
import os
import statistics
import time
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import lightning as L
import torch
from lightning.pytorch.loggers import CSVLogger

from ncl_lightning.bench import Timing
from ncl_lightning.data import ImageFolderDataModule
from ncl_lightning.foundation.errors import DataNotFoundError
from ncl_lightning.methods import CL, NCL, BayesNCL
from ncl_lightning.nn import ResNet
from ncl_lightning.runtime.progress import Progress
from ncl_lightning.runtime.speed_switches import apply_speed_switches

BATCH_SIZE = 256
IMAGE_SIZE = 32
WARMUP_STEPS = 3
TIMED_STEPS = 8
LOG_EVERY = 10
METHODS: dict[str, type[CL]] = {"CL": CL, "NCL": NCL, "BayesNCL": BayesNCL}
PIPELINES = ("device", "cpu")
DEFAULT_DATA = Path("data/cifar10-real-subset")  # as the subset configs; NCL_BENCH_DATA overrides


def _flag(name: str, default: bool) -> bool:
    return os.environ.get(name, str(int(default))).lower() in ("1", "true", "yes")


def switches() -> dict[str, Any]:
    """Precision, channels_last and torch.compile of the run (environment overrides)."""
    return {
        "precision": os.environ.get("NCL_BENCH_PRECISION", "bf16-mixed"),
        "channels_last": _flag("NCL_BENCH_CHANNELS_LAST", True),
        "torch_compile": _flag("NCL_BENCH_COMPILE", False),
    }


def data_root() -> Path:
    """The ImageFolder of 32x32 images the training steps read."""
    root = Path(os.environ.get("NCL_BENCH_DATA", DEFAULT_DATA)).resolve()
    if not (root / "train").is_dir():
        raise DataNotFoundError(
            f"throughput benchmark: no ImageFolder at {root} (expected train/<class>/...); "
            "set NCL_BENCH_DATA to a folder of 32x32 images",
            key="NCL_BENCH_DATA",
        )
    return root


def make_model(name: str, settings: dict[str, Any], num_classes: int = 10) -> CL:
    """``name`` with the CIFAR heads of the papers and the given switches."""
    return METHODS[name](
        ResNet(18, "cifar"),
        proj_hidden_dim=2048,
        proj_output_dim=256,
        num_classes=num_classes,
        batch_size=BATCH_SIZE,
        warmup_epochs=1.0,
        channels_last=settings["channels_last"],
        torch_compile=settings["torch_compile"],
    )


class StepClock(L.Callback):
    """Wall-clock times of the ends of training batches (after the optimiser step)."""

    def __init__(self) -> None:
        self.ends: list[float] = []

    def on_train_batch_end(self, *args: Any) -> None:
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        self.ends.append(time.perf_counter())


def bench_data(pipeline: str, batch_size: int | None = None) -> ImageFolderDataModule:
    """The benchmark's CIFAR-10 images (decoded once into memory) with ``pipeline``."""
    return ImageFolderDataModule(
        str(data_root()),
        image_size=IMAGE_SIZE,
        batch_size=BATCH_SIZE if batch_size is None else batch_size,
        cache="memory",
        augment_on=pipeline,  # type: ignore[arg-type]
    )


def bench_fit(
    model: L.LightningModule,
    datamodule: L.LightningDataModule,
    max_steps: int,
    callback: L.Callback,
    settings: dict[str, Any],
) -> L.Trainer:
    """``Trainer.fit`` of ``max_steps`` training steps, no validation or checkpoints, a CSV
    logger (every ``LOG_EVERY`` steps) in a temporary folder, with ``callback``."""
    with TemporaryDirectory() as logs:
        trainer = L.Trainer(
            max_steps=max_steps,
            max_epochs=100,
            limit_val_batches=0,
            precision=settings["precision"],
            logger=CSVLogger(logs),
            log_every_n_steps=LOG_EVERY,
            callbacks=[callback],
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            num_sanity_val_steps=0,
        )
        trainer.fit(model, datamodule)
    return trainer


def full_step(
    name: str, pipeline: str, settings: dict[str, Any]
) -> tuple[list[float], float | None]:
    """Seconds of each timed complete training step (end of one batch to the end of the
    next), and the peak GPU memory in GiB (or None)."""
    torch.manual_seed(0)
    datamodule = bench_data(pipeline)
    model = make_model(name, settings, datamodule.num_classes)
    clock = StepClock()
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    bench_fit(model, datamodule, WARMUP_STEPS + TIMED_STEPS, clock, settings)
    ends = clock.ends[WARMUP_STEPS - 1 :]
    peak = torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else None
    return [b - a for a, b in itertools.pairwise(ends)], peak


class BareStep:
    """Backbone + projector forward and backward on pre-made view tensors, nothing else.

    The loss is the plain sum of the projector outputs (unit gradients: no tiny values
    that would make the backward pass run on slow denormal numbers on a CPU).
    """

    def __init__(self, settings: dict[str, Any]) -> None:
        torch.manual_seed(0)
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self.model = self.build(settings).to(self.device)
        apply_speed_switches(self.model)  # what ncl-cli's SpeedSwitches does at setup
        self.model.train()
        shape = (BATCH_SIZE, 3, IMAGE_SIZE, IMAGE_SIZE)
        self.views = [torch.randn(shape, device=self.device) for _ in range(2)]
        precision = settings["precision"]
        self.dtype = torch.bfloat16 if precision.startswith("bf16") else torch.float16
        self.mixed = precision.endswith("-mixed")
        self.samples: list[float] = []
        for _ in range(self.warmup):
            self.step()

    warmup = WARMUP_STEPS

    @staticmethod
    def build(settings: dict[str, Any]) -> torch.nn.Module:
        """The method whose backbone and projector are timed (CL on ResNet-18)."""
        return make_model("CL", settings)

    def step(self) -> None:
        """One forward and backward of both views."""
        model = self.model
        model.zero_grad(set_to_none=True)
        with torch.autocast(self.device.type, dtype=self.dtype, enabled=self.mixed):
            loss = sum(model.projector(model.backbone(v)).float().sum() for v in self.views)
        loss.backward()
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    def measure(self, steps: int) -> None:
        """Time ``steps`` steps; the samples accumulate over the whole benchmark."""
        for _ in range(steps):
            start = time.perf_counter()
            self.step()
            self.samples.append(time.perf_counter() - start)

    @property
    def images_per_second(self) -> float:
        """Images (not views) per second, from the median step time."""
        return _rate(self.samples)


def _rate(times: list[float]) -> float:
    return BATCH_SIZE / statistics.median(times)


def run(repeats: int = 3) -> list[Timing]:
    """(a) and (b) for every method and pipeline; rows carry images/s in ``note``.

    ``Timing.seconds`` is the time of one batch of 256 images (``256 / images/s``), so the
    table's seconds column stays a time. The methods alternate in ``repeats`` rounds, each
    in a rotated order. (b) is timed for two steps right before and right after every (a)
    run; each run's ratio uses those four neighbouring (b) steps, so the slow drift of a
    shared machine cancels, and the reported ratio is the median over the rounds (NCL and
    BayesNCL against CL likewise, within each round). Images/s are medians over all steps.
    """
    settings = switches()
    label = ", ".join(f"{k}={v}" for k, v in settings.items())
    bare = BareStep(settings)
    steps: dict[tuple[str, str], list[float]] = {}
    ratios: dict[tuple[str, str], list[float]] = {}
    per_round: dict[tuple[str, str, int], float] = {}
    peaks: dict[tuple[str, str], float | None] = {}
    names = list(METHODS)
    rounds = max(1, repeats)
    progress = Progress(len(PIPELINES) * rounds * len(names), "throughput")
    for pipeline in PIPELINES:
        for r in range(rounds):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                first = len(bare.samples)
                with progress.unit(f"(a) {name}, {pipeline} augmentation, round {r + 1}/{rounds}"):
                    bare.measure(2)
                    times, peaks[pipeline, name] = full_step(name, pipeline, settings)
                    bare.measure(2)
                local = _rate(bare.samples[first:])
                per_round[pipeline, name, r] = _rate(times)
                ratios.setdefault((pipeline, name), []).append(_rate(times) / local)
                steps.setdefault((pipeline, name), []).extend(times)
    progress.finish()
    limit = bare.images_per_second
    spread = f"{BATCH_SIZE / max(bare.samples):.1f}-{BATCH_SIZE / min(bare.samples):.1f}"
    rows = [
        Timing(
            f"(b) bare backbone+projector fwd/bwd, 2 x 256 x 3x32x32 ({label})",
            BATCH_SIZE / limit,
            note=f"{limit:.1f} img/s (median of {len(bare.samples)}; range {spread})",
        )
    ]
    for (pipeline, name), times in steps.items():
        ratio = statistics.median(ratios[pipeline, name])
        each = "/".join(f"{x:.2f}" for x in ratios[pipeline, name])
        vs_cl = ""
        if name != "CL":
            rel = [
                per_round[pipeline, name, r] / per_round[pipeline, "CL", r] for r in range(rounds)
            ]
            vs_cl = f", {statistics.median(rel) - 1:+.1%} vs CL"
        peak = peaks[pipeline, name]
        memory = f", peak {peak:.2f} GiB" if peak is not None else ""
        verdict = "meets" if ratio >= 0.9 else "MISSES"
        rows.append(
            Timing(
                f"(a) {name}, {pipeline} augmentation, full training step",
                BATCH_SIZE / _rate(times),
                note=(
                    f"{_rate(times):.1f} img/s (median of {len(times)} steps), (a)/(b) "
                    f"{ratio:.3f} ({verdict} >= 0.9; rounds {each}){vs_cl}{memory}"
                ),
            )
        )
    return rows
