"""Training throughput against the network's limit: ``python -m benchmarks throughput``.

For CL, NCL and BayesNCL (ResNet-18 with the CIFAR stem, projector 2048-256, batch 256 of
32x32 images, two views), each ``step_mode`` of the method (``eager``, ``compiled``,
``graphs``: issue 43) and each augmentation pipeline (``device``: batched on the training
device; ``cpu``: torchvision in the loader workers), it measures

(a) images/s of the complete training step, through ``Trainer.fit`` on the real CIFAR-10
    images beside the project (decoded once into memory): loading, augmentation, forward,
    the loss with gathering, backward, the LARS step, the online probe and kNN bank,
    logging (a CSV logger, every 10 steps), over a steady window of steps after warm-up
    (more warm-up for the captured modes: compilation, CUDA-graph recording);
(b) images/s of the bare backbone + projector forward and backward and a LARS step on
    pre-made tensors of the same shape (two views of 256), eager, with the same precision
    and memory format;
(b') the same bare step captured: the forward (and with it the backward) and the LARS
    update each a ``torch.compile`` graph, ``mode="reduce-overhead"`` (CUDA graphs) on a
    GPU, the default mode on a CPU, fixed shapes;

and prints them with the ratios (a)/(b) and (a)/(b') (goal >= 0.9), NCL's and BayesNCL's
(a) relative to CL's (same pipeline and mode), and per (a) run: device and host ms per
step, on a GPU the isolated steps' host against device ms and the peak memory, what
``torch._dynamo`` compiled (graphs, graph breaks, graphs compiled inside the timed window),
and the Python calls per step of the training thread.

Timing ([`benchmarks.clock`][]): on a GPU a CUDA event at every step boundary,
read once after the window (elapsed between the first and last boundary / steps); no
synchronize inside a timed window, so the host may run ahead as it does in training. On a
CPU the host clock.

Knobs (environment): ``NCL_BENCH_METHODS`` (``CL,NCL,BayesNCL``), ``NCL_BENCH_MODES``
(default ``eager,compiled,graphs`` on a GPU, ``eager`` on a CPU, where ``graphs`` runs
eagerly), ``NCL_BENCH_CPU_PIPELINE_MODES`` (the modes of the ``cpu`` pipeline; default
``NCL_BENCH_MODES``), ``NCL_BENCH_PIPELINES`` (``device,cpu``), ``NCL_BENCH_BARE``
(``eager,captured``), ``NCL_BENCH_CALL_STEPS`` (steps whose Python calls are counted, 3;
0: none). The switches default to the paper configs' choice (bf16-mixed, channels_last, no
network-only torch.compile); ``NCL_BENCH_PRECISION`` / ``NCL_BENCH_CHANNELS_LAST`` /
``NCL_BENCH_COMPILE`` measure others (docs/performance.md has the comparison).
``NCL_BENCH_DATA`` points at another ImageFolder of 32x32 images. Each training run is
announced on stderr (``[throughput k/N] ...``); ``python -m benchmarks`` keeps
Lightning's banners quiet during them (``--verbose`` shows them). A run that fails (e.g. a
mode that does not compile here) gives a ``FAILED`` row and its traceback on stderr; the
other runs go on.
"""

from __future__ import annotations

import os
import statistics
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import lightning as L
import torch
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.profilers import Profiler

from benchmarks import Timing
from benchmarks.clock import EventTimer, StepClock, format_counts
from ncl_lightning.data import ImageFolderDataModule
from ncl_lightning.foundation.errors import ConfigError, DataNotFoundError
from ncl_lightning.foundation.progress import Progress
from ncl_lightning.methods import CL, NCL, BayesNCL
from ncl_lightning.nn import ResNet
from ncl_lightning.optim import LARS

BATCH_SIZE = 256
IMAGE_SIZE = 32
WARMUP_STEPS = 3
CAPTURED_WARMUP = 6  # compiled / graphs: compilation, then CUDA-graph warm-up and recording
TIMED_STEPS = 8
CALL_STEPS = 3
LOG_EVERY = 10
BARE_LR = 0.01  # small: the bare step's weights barely move over a benchmark
METHODS: dict[str, type[CL]] = {"CL": CL, "NCL": NCL, "BayesNCL": BayesNCL}
PIPELINES = ("device", "cpu")
MODES = ("eager", "compiled", "graphs")
BARE_KINDS = ("eager", "captured")
DEFAULT_DATA = Path("data/cifar10-real-subset")  # as the subset configs; NCL_BENCH_DATA overrides


def _flag(name: str, default: bool) -> bool:
    return os.environ.get(name, str(int(default))).lower() in ("1", "true", "yes")


def selection(env: str, valid: tuple[str, ...], default: tuple[str, ...]) -> tuple[str, ...]:
    """The comma-separated names of ``env`` (any case), else ``default``.

    Raises:
        ConfigError: A name is not one of ``valid`` (the message lists them).
    """
    raw = os.environ.get(env, "").strip()
    if not raw:
        return default
    by_lower = {v.lower(): v for v in valid}
    chosen = []
    for item in (x.strip() for x in raw.split(",")):
        if item.lower() not in by_lower:
            raise ConfigError(f"{env}: {item!r} is not one of {', '.join(valid)}", key=env)
        chosen.append(by_lower[item.lower()])
    return tuple(dict.fromkeys(chosen))


def methods(default: tuple[str, ...] = tuple(METHODS)) -> tuple[str, ...]:
    """``NCL_BENCH_METHODS``: the methods to run."""
    return selection("NCL_BENCH_METHODS", tuple(METHODS), default)


def modes() -> tuple[str, ...]:
    """``NCL_BENCH_MODES``: every step mode on a GPU, ``eager`` on a CPU (where ``graphs``
    runs eagerly and compiling ResNet-18 costs a minute per run)."""
    default = MODES if torch.cuda.is_available() else ("eager",)
    return selection("NCL_BENCH_MODES", MODES, default)


def pipelines() -> tuple[str, ...]:
    """``NCL_BENCH_PIPELINES``: the augmentation pipelines to run."""
    return selection("NCL_BENCH_PIPELINES", PIPELINES, PIPELINES)


def pipeline_modes(pipeline: str) -> tuple[str, ...]:
    """The step modes run with ``pipeline``: ``NCL_BENCH_CPU_PIPELINE_MODES`` for ``cpu``."""
    if pipeline == "cpu":
        return selection("NCL_BENCH_CPU_PIPELINE_MODES", MODES, modes())
    return modes()


def bare_kinds() -> tuple[str, ...]:
    """``NCL_BENCH_BARE``: the bare rows, ``eager`` (b) and ``captured`` (b')."""
    return selection("NCL_BENCH_BARE", BARE_KINDS, BARE_KINDS)


def call_steps() -> int:
    """``NCL_BENCH_CALL_STEPS``: steps whose Python calls each (a) run counts."""
    return max(0, int(os.environ.get("NCL_BENCH_CALL_STEPS", CALL_STEPS)))


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


def build_method(
    name: str,
    backbone: torch.nn.Module,
    settings: dict[str, Any],
    num_classes: int,
    batch_size: int,
    step_mode: str,
    method: type[CL] | None = None,
    **heads: Any,
) -> CL:
    """Method ``name`` (its class, or ``method``) on ``backbone`` with the projector
    ``heads``, the benchmark's switches (``settings``) and ``step_mode``: what every
    benchmark model shares."""
    return (method or METHODS[name])(
        backbone,
        num_classes=num_classes,
        batch_size=batch_size,
        warmup_epochs=1.0,
        channels_last=settings["channels_last"],
        torch_compile=settings["torch_compile"],
        step_mode=step_mode,  # type: ignore[arg-type]
        **heads,
    )


def make_model(
    name: str, settings: dict[str, Any], num_classes: int = 10, step_mode: str = "eager"
) -> CL:
    """``name`` with the CIFAR heads of the papers, the given switches and step mode."""
    return build_method(
        name, ResNet(18, "cifar"), settings, num_classes, BATCH_SIZE, step_mode,
        proj_hidden_dim=2048, proj_output_dim=256,
    )  # fmt: skip


def bench_data(
    pipeline: str, batch_size: int | None = None, image_size: int = IMAGE_SIZE
) -> ImageFolderDataModule:
    """The benchmark's CIFAR-10 images (decoded once into memory) with ``pipeline``."""
    return ImageFolderDataModule(
        str(data_root()),
        image_size=image_size,
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
    profiler: Profiler | None = None,
) -> L.Trainer:
    """``Trainer.fit`` of ``max_steps`` training steps, no validation or checkpoints, a CSV
    logger (every ``LOG_EVERY`` steps) in a temporary folder, with ``callback`` (and
    ``profiler``)."""
    with TemporaryDirectory() as logs:
        trainer = L.Trainer(
            max_steps=max_steps,
            max_epochs=100,
            limit_val_batches=0,
            precision=settings["precision"],
            logger=CSVLogger(logs),
            log_every_n_steps=LOG_EVERY,
            callbacks=[callback],
            profiler=profiler,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            num_sanity_val_steps=0,
        )
        trainer.fit(model, datamodule)
    return trainer


@dataclass
class FullStep:
    """What one timed ``Trainer.fit`` measured (seconds per step).

    Attributes:
        seconds: The steady window's seconds per step: device (CUDA events) on a GPU, else
            host.
        host_seconds: The steady window's host seconds per step.
        isolated: Median (host, device) seconds of the isolated steps (GPU), or ``None``.
        calls: (Python calls, C calls) per step of the training thread, or ``None``.
        top: The most called Python functions, per step.
        peak_gib: Peak GPU memory, or ``None``.
        compiled: What ``torch._dynamo`` compiled during the run
            ([`StepClock`][benchmarks.clock.StepClock]).
    """

    seconds: float
    host_seconds: float
    isolated: tuple[float, float | None] | None = None
    calls: tuple[float, float] | None = None
    top: list[tuple[str, float]] = field(default_factory=list)
    peak_gib: float | None = None
    compiled: dict[str, int] = field(default_factory=dict)


def timed_fit(
    model: L.LightningModule,
    datamodule: L.LightningDataModule,
    settings: dict[str, Any],
    mode: str = "eager",
    calls: int | None = None,
) -> FullStep:
    """``Trainer.fit`` under a [`StepClock`][benchmarks.clock.StepClock]: warm-up
    (longer for a captured ``mode``), ``TIMED_STEPS`` steady steps, isolated steps on a
    GPU, then ``calls`` (default ``NCL_BENCH_CALL_STEPS``) steps of counted Python calls."""
    warmup = WARMUP_STEPS if mode == "eager" else CAPTURED_WARMUP
    clock = StepClock(warmup, TIMED_STEPS, calls=call_steps() if calls is None else calls)
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    bench_fit(model, datamodule, clock.max_steps, clock, settings)
    return FullStep(
        seconds=clock.step_seconds(),
        host_seconds=clock.host_step_seconds(),
        isolated=clock.isolated_seconds(),
        calls=clock.calls_per_step(),
        top=clock.top_functions(),
        peak_gib=torch.cuda.max_memory_allocated() / 2**30 if cuda else None,
        compiled=clock.compiled,
    )


def full_step(name: str, pipeline: str, settings: dict[str, Any], mode: str = "eager") -> FullStep:
    """The complete training step of ``name`` with ``pipeline`` and step ``mode``."""
    torch.manual_seed(0)
    datamodule = bench_data(pipeline)
    model = make_model(name, settings, datamodule.num_classes, step_mode=mode)
    return timed_fit(model, datamodule, settings, mode)


class BareStep:
    """Backbone + projector forward and backward and a LARS step on pre-made view tensors,
    nothing else; with ``captured``, the forward (with its backward) and the LARS update are
    ``torch.compile`` graphs (``mode="reduce-overhead"``, CUDA graphs, on a GPU).

    The loss is the plain sum of the projector outputs (unit gradients: no tiny values
    that would make the backward pass run on slow denormal numbers on a CPU).

    Attributes:
        samples: Seconds per step of each [`measure`][] call (device seconds on a GPU).
        host_samples: Host seconds per step of each call.
    """

    warmup = WARMUP_STEPS

    def __init__(self, settings: dict[str, Any], captured: bool = False) -> None:
        torch.manual_seed(0)
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self.model = self.build(settings).to(self.device)
        self.model.configure_model()  # the speed switches, as Trainer.fit does
        self.model.train()
        shape = (BATCH_SIZE, 3, IMAGE_SIZE, IMAGE_SIZE)
        self.views = [torch.randn(shape, device=self.device) for _ in range(2)]
        precision = settings["precision"]
        self.dtype = torch.bfloat16 if precision.startswith("bf16") else torch.float16
        self.mixed = precision.endswith("-mixed")
        params = [p for m in (self.model.backbone, self.model.projector) for p in m.parameters()]
        self.optimizer = LARS(
            params, lr=BARE_LR, momentum=0.9, weight_decay=1e-4, eta=0.02, clip_lr=True
        )
        self.captured = captured
        self.compile_mode = "reduce-overhead" if self.device.type == "cuda" else "default"
        self._loss: Callable[[], torch.Tensor] = self.loss
        self._update: Callable[[], None] = self.update
        if captured:
            self._loss = torch.compile(self.loss, mode=self.compile_mode)
            self._update = torch.compile(self.update, mode=self.compile_mode)
        self.samples: list[float] = []
        self.host_samples: list[float] = []
        for _ in range(CAPTURED_WARMUP if captured else self.warmup):
            self.step()

    @staticmethod
    def build(settings: dict[str, Any]) -> torch.nn.Module:
        """The method whose backbone and projector are timed (CL on ResNet-18)."""
        return make_model("CL", settings)

    def loss(self) -> torch.Tensor:
        """The forward of both views and the summed loss."""
        model = self.model
        with torch.autocast(self.device.type, dtype=self.dtype, enabled=self.mixed):
            return sum(model.projector(model.backbone(v)).float().sum() for v in self.views)

    def update(self) -> None:
        """The LARS step."""
        self.optimizer.step()

    def forward_backward(self) -> None:
        """Forward and backward of both views (the gradients set afresh)."""
        self.optimizer.zero_grad(set_to_none=True)
        if self.captured and self.device.type == "cuda":
            torch.compiler.cudagraph_mark_step_begin()  # a new step: replay, do not record
        self._loss().backward()

    def step(self) -> None:
        """One forward, backward and LARS step; nothing waits for the device."""
        self.forward_backward()
        self._update()

    def measure(self, steps: int) -> None:
        """Time ``steps`` steps with CUDA events (on a GPU) and the host clock, read once
        after the last; one sample per call, accumulating over the whole benchmark."""
        timer = EventTimer()
        timer.mark()
        for _ in range(steps):
            self.step()
        timer.mark()
        self.samples.append(timer.seconds())
        self.host_samples.append(timer.host_seconds())

    @property
    def images_per_second(self) -> float:
        """Images (not views) per second, from the median sample."""
        return _rate(self.samples)


def bare_steps() -> int:
    """Steps per bare measurement: 2 on a CPU (seconds each), 10 on a GPU."""
    return 10 if torch.cuda.is_available() else 2


def _rate(times: list[float]) -> float:
    return BATCH_SIZE / statistics.median(times)


def announce(bench: str, what: str, result: FullStep) -> None:
    """One ``[bench] result: ...`` line on stderr as soon as a run is measured (a run cut
    short by a time limit keeps what it had measured)."""
    rate = f"{BATCH_SIZE / result.seconds:.1f} img/s" if bench == "throughput" else ""
    print(f"[{bench}] result: {what}: {rate} {step_note(result)}", file=sys.stderr, flush=True)


def failure(what: str, err: BaseException) -> Timing:
    """A row for a run that raised (its traceback goes to stderr)."""
    traceback.print_exception(err, file=sys.stderr)
    return Timing(what, float("nan"), note=f"FAILED: {type(err).__name__}: {err}"[:300])


def step_note(result: FullStep) -> str:
    """Device and host ms per step, isolated steps, peak memory, compilation, Python calls."""
    parts = [f"{1e3 * result.seconds:.2f} ms/step"]
    if torch.cuda.is_available():
        parts[0] = f"device {1e3 * result.seconds:.2f} ms/step"
    parts.append(f"host {1e3 * result.host_seconds:.2f} ms/step")
    if result.isolated is not None:
        host, device = result.isolated
        bound = "" if device is None else (" (GPU-bound)" if host < device else " (host-bound)")
        device_ms = "-" if device is None else f"{1e3 * device:.2f}"
        parts.append(f"isolated step host {1e3 * host:.2f} / device {device_ms} ms{bound}")
    if result.peak_gib is not None:
        parts.append(f"peak {result.peak_gib:.2f} GiB")
    compiled = format_counts(result.compiled)
    if compiled:
        parts.append(compiled)
    if result.calls is not None:
        parts.append(f"{result.calls[0]:.0f} Python calls/step ({result.calls[1]:.0f} C calls)")
    return "; ".join(parts)


def run(repeats: int = 3) -> list[Timing]:
    """(b), (b') and (a) for every selected method, mode and pipeline; images/s in ``note``.

    ``Timing.seconds`` is the time of one batch of 256 images (``256 / images/s``), so the
    table's seconds column stays a time. The methods alternate in ``repeats`` rounds, each
    in a rotated order. The bare steps are timed right before and right after every (a)
    run; each run's ratios use those neighbouring bare samples, so the slow drift of a
    shared machine cancels, and the reported ratio is the median over the rounds (NCL and
    BayesNCL against CL likewise, within each round). Images/s are medians over rounds.
    """
    settings = switches()
    label = ", ".join(f"{k}={v}" for k, v in settings.items())
    names = list(methods())
    rows: list[Timing] = []
    bares: dict[str, BareStep] = {}
    titles = {
        "eager": "(b) bare backbone+projector fwd/bwd + LARS step, eager",
        "captured": "(b') bare backbone+projector fwd/bwd + LARS step, captured",
    }
    for kind in bare_kinds():
        try:
            bares[kind] = BareStep(settings, captured=kind == "captured")
        except Exception as err:  # a capture that fails here: reported, the rest goes on
            rows.append(failure(titles[kind], err))
    configs = [(pipeline, mode) for pipeline in pipelines() for mode in pipeline_modes(pipeline)]
    rounds = max(1, repeats)
    progress = Progress(len(configs) * rounds * len(names), "throughput")
    results: dict[tuple[str, str, str], list[FullStep]] = {}
    ratios: dict[tuple[str, str, str, str], list[float]] = {}
    per_round: dict[tuple[str, str, str, int], float] = {}
    failed: dict[tuple[str, str, str], Timing] = {}
    for pipeline, mode in configs:
        for r in range(rounds):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                key = (pipeline, mode, name)
                what = f"(a) {name}, {mode} step, {pipeline} augmentation, full training step"
                if key in failed:
                    continue
                firsts = {kind: len(b.samples) for kind, b in bares.items()}
                with progress.unit(f"(a) {name}, {mode}, {pipeline} augmentation, round {r + 1}"):
                    for bare in bares.values():
                        bare.measure(bare_steps())
                    try:
                        result = full_step(name, pipeline, settings, mode)
                    except Exception as err:
                        failed[key] = failure(what, err)
                        continue
                    for bare in bares.values():
                        bare.measure(bare_steps())
                announce("throughput", f"{what}, round {r + 1}", result)
                results.setdefault(key, []).append(result)
                per_round[pipeline, mode, name, r] = result.seconds
                for kind, bare in bares.items():
                    local = statistics.median(bare.samples[firsts[kind] :])
                    ratios.setdefault((*key, kind), []).append(local / result.seconds)
    progress.finish()
    for kind, bare in bares.items():
        limit = bare.images_per_second
        spread = f"{BATCH_SIZE / max(bare.samples):.1f}-{BATCH_SIZE / min(bare.samples):.1f}"
        how = f", mode={bare.compile_mode}" if bare.captured else ""
        rows.append(
            Timing(
                f"{titles[kind]}, 2 x {BATCH_SIZE} x 3x32x32 ({label}{how})",
                BATCH_SIZE / limit,
                note=(
                    f"{limit:.1f} img/s (median of {len(bare.samples)} samples of "
                    f"{bare_steps()} steps; range {spread}); host "
                    f"{1e3 * statistics.median(bare.host_samples):.2f} ms/step"
                ),
            )
        )
    mark = {"eager": "(a)/(b)", "captured": "(a)/(b')"}
    for key, measured in results.items():
        pipeline, mode, name = key
        seconds = statistics.median(m.seconds for m in measured)
        rate = BATCH_SIZE / seconds
        notes = [f"{rate:.1f} img/s (median of {len(measured)} rounds)"]
        for kind in bares:
            each = ratios[(*key, kind)]
            rounds_text = "/".join(f"{x:.2f}" for x in each)
            verdict = "meets" if statistics.median(each) >= 0.9 else "MISSES"
            notes.append(
                f"{mark[kind]} {statistics.median(each):.3f} ({verdict} >= 0.9; rounds "
                f"{rounds_text})"
            )
        if name != "CL" and (pipeline, mode, "CL") in results:
            rel = [
                per_round[pipeline, mode, "CL", r] / per_round[pipeline, mode, name, r]
                for r in range(rounds)
                if (pipeline, mode, "CL", r) in per_round and (pipeline, mode, name, r) in per_round
            ]
            if rel:
                notes.append(f"{statistics.median(rel) - 1:+.1%} vs CL")
        notes.append(step_note(measured[len(measured) // 2]))
        rows.append(
            Timing(
                f"(a) {name}, {mode} step, {pipeline} augmentation, full training step",
                seconds,
                note="; ".join(notes),
            )
        )
    rows.extend(failed.values())
    return rows
