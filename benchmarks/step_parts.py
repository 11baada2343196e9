"""Where a training step goes: ``python -m benchmarks step``.

For CL, NCL and BayesNCL, each selected ``step_mode`` (``eager`` on a CPU, all three on a
GPU; the knobs ``NCL_BENCH_METHODS``, ``NCL_BENCH_MODES``, ``NCL_BENCH_PIPELINES`` of
``throughput``) and both augmentation pipelines (``device``: batched on the training
device; ``cpu``: torchvision in the loader workers), a real ``Trainer.fit`` on the
CIFAR-10 images beside the project (``NCL_BENCH_DATA``, decoded once into memory; batch
256, two views, the online probe and kNN bank, a CSV logger every 10 steps) runs under
[`StepParts`][benchmarks.parts.StepParts], which reports per steady-state step each
part's host milliseconds, on a GPU its device milliseconds, the operators dispatched (and
of them views, which launch no kernel) and the sync-prone calls (``item``, ``nonzero``, a
boolean-mask index, ``tolist``, copies to the host...). A second, uninstrumented fit of
the same configuration counts the Python function calls of ``CALLS`` steady-state steps
(from one ``on_train_batch_start`` to that ``CALLS`` steps later, the training thread
only: [`StepClock`][benchmarks.clock.StepClock]): the 'Python calls / step'
column, with the C functions called from Python beside it. Two networks:

* ``resnet18`` (the default on a GPU): ResNet-18 with the CIFAR stem and the papers'
  projector 2048-256, with the switches of ``throughput`` (bf16-mixed, channels_last);
  the bare backbone + projector forward and backward on pre-made tensors
  ([`BareStep`][benchmarks.throughput.BareStep]) gives the full step / bare network
  ratio.
* ``tiny`` (the default on a CPU): the framework-overhead mode. A model of two to three
  thousand parameters ([`TinyNet`][], one patch convolution, a projector 16-32-16 and
  for BayesNCL a gating head 16-32-16) in float32, so that the network no longer hides
  the harness: the step's milliseconds minus the bare network's are the harness's
  (loading and views, loss, probe, guard, optimiser, logging, Lightning), and its
  operators minus the network's are those the framework dispatches around it. On a CPU
  it runs on one intra-op thread: with two, on a 2-core machine, the threads of each
  operator wait on each other while a loader worker holds a core, and those stalls
  (100 ms per step for the tiny forward) would hide the harness.

``NCL_BENCH_STEP_NETWORK`` (``resnet18`` | ``tiny``) picks the other one; the precision and
channels_last of ``throughput`` apply (``NCL_BENCH_PRECISION``...; the tiny network's
defaults are ``32-true`` and no channels_last). ``--repeats`` rounds alternate the methods;
each figure is the mean per step over a run's timed (or counted) steps, which include the
logging steps (one in 10), then the median over the rounds for times and the mean for
counts. The per-part tables and a table of all configurations are printed after the runs;
the rows returned (the table under ``## step``) are the full steps. BayesNCL's step
against NCL's on random tensors alone is the ``step-ratio`` benchmark
([`benchmarks.step`][]).
"""

from __future__ import annotations

import os
import statistics
from typing import Any

import torch
from torch import Tensor, nn

from benchmarks import Timing
from benchmarks.clock import StepClock
from benchmarks.counting import OpCounter
from benchmarks.parts import PARTS, StepParts, instrument
from benchmarks.throughput import (
    BATCH_SIZE,
    CAPTURED_WARMUP,
    IMAGE_SIZE,
    METHODS,
    BareStep,
    bench_data,
    bench_fit,
    build_method,
    methods,
    pipeline_modes,
    pipelines,
    switches,
)
from benchmarks.throughput import _flag as flag
from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.foundation.progress import Progress
from ncl_lightning.methods import CL
from ncl_lightning.nn import ResNet

NETWORKS = ("resnet18", "tiny")
WARMUP, TIMED, COUNTED = 3, 20, 10
CALLS = 5  # steps whose Python calls are counted, in a fit of their own
TINY_THREADS = 1  # intra-op threads of the tiny network's runs on a CPU (module docstring)
TINY_WIDTH, TINY_HIDDEN, TINY_PROJ = 16, 32, 16


class TinyNet(nn.Module):
    """One 4x4 stride-4 convolution (3 -> ``width`` channels on the 8x8 patches of a 32x32
    image), BatchNorm, ReLU and a global average pool: 800 parameters at width 16, a
    network whose forward and backward cost next to nothing (a backbone: ``out_dim``).

    Args:
        width: Output channels, the feature width ``out_dim``.
    """

    def __init__(self, width: int = TINY_WIDTH) -> None:
        super().__init__()
        self.out_dim = width
        self.features = nn.Sequential(
            nn.Conv2d(3, width, 4, stride=4, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(inplace=True),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
        )

    def forward(self, x: Tensor) -> Tensor:
        """Images ``[B, 3, H, W]`` -> features ``[B, width]``."""
        return self.features(x)


def network() -> str:
    """``NCL_BENCH_STEP_NETWORK``, else ``resnet18`` on a GPU and ``tiny`` on a CPU."""
    default = "resnet18" if torch.cuda.is_available() else "tiny"
    name = os.environ.get("NCL_BENCH_STEP_NETWORK", default).lower()
    if name not in NETWORKS:
        raise ConfigError(
            f"NCL_BENCH_STEP_NETWORK: {name!r} is not one of {', '.join(NETWORKS)}",
            key="NCL_BENCH_STEP_NETWORK",
        )
    return name


def settings_for(net: str) -> dict[str, Any]:
    """The switches of ``throughput``; for the tiny network float32, no channels_last."""
    settings = switches()
    if net == "tiny":
        settings["precision"] = os.environ.get("NCL_BENCH_PRECISION", "32-true")
        settings["channels_last"] = flag("NCL_BENCH_CHANNELS_LAST", False)
    return settings


def make_tiny(
    name: str, settings: dict[str, Any], num_classes: int = 10, step_mode: str = "eager"
) -> CL:
    """``name`` on [`TinyNet`][] with a 16-32-16 projector (and gating head)."""
    return build_method(
        name, TinyNet(), settings, num_classes, BATCH_SIZE, step_mode,
        proj_hidden_dim=TINY_HIDDEN, proj_output_dim=TINY_PROJ,
    )  # fmt: skip


class TinyBareStep(BareStep):
    """[`BareStep`][benchmarks.throughput.BareStep] of the tiny network."""

    warmup = WARMUP

    @staticmethod
    def build(settings: dict[str, Any]) -> nn.Module:
        return make_tiny("CL", settings)


def _build(
    name: str,
    pipeline: str,
    net: str,
    settings: dict[str, Any],
    mode: str,
    parts: StepParts | None = None,
):
    torch.manual_seed(0)
    datamodule = bench_data(pipeline, BATCH_SIZE)
    if net == "resnet18":
        backbone, heads = ResNet(18, "cifar"), {"proj_hidden_dim": 2048, "proj_output_dim": 256}
    else:
        backbone, heads = TinyNet(), {"proj_hidden_dim": TINY_HIDDEN, "proj_output_dim": TINY_PROJ}
    method = None if parts is None else instrument(METHODS[name], parts)
    model = build_method(
        name, backbone, settings, datamodule.num_classes, BATCH_SIZE, mode, method, **heads
    )
    return model, datamodule


def measure(
    name: str, pipeline: str, net: str, settings: dict[str, Any], mode: str = "eager"
) -> StepParts:
    """One ``Trainer.fit`` of ``name`` with ``pipeline`` and step ``mode`` under
    [`StepParts`][] (the captured modes count no operators: their graphs run kernels
    that are not ATen operators)."""
    warmup = WARMUP if mode == "eager" else max(WARMUP, CAPTURED_WARMUP)
    parts = StepParts(warmup, TIMED, COUNTED if mode == "eager" else 0)
    model, datamodule = _build(name, pipeline, net, settings, mode, parts)
    bench_fit(model, datamodule, parts.max_steps, parts.stopper, settings, profiler=parts)
    return parts


def python_calls(
    name: str, pipeline: str, net: str, settings: dict[str, Any], mode: str = "eager"
) -> StepClock:
    """A ``Trainer.fit`` with nothing but a [`StepClock`][benchmarks.clock.StepClock]
    that counts the Python calls of ``CALLS`` steps after the warm-up."""
    model, datamodule = _build(name, pipeline, net, settings, mode)
    warmup = WARMUP if mode == "eager" else max(WARMUP, CAPTURED_WARMUP)
    clock = StepClock(warmup, timed=0, isolated=0, calls=CALLS)
    bench_fit(model, datamodule, clock.max_steps, clock, settings)
    return clock


def _syncs(kinds: dict[str, float]) -> str:
    total = sum(kinds.values())
    if not total:
        return "0"
    return f"{total:g} (" + ", ".join(f"{k} {v:g}" for k, v in kinds.items() if v) + ")"


def _summarise(runs: list[StepParts]) -> dict[str, Any]:
    """Medians of the times, means of the counts over the rounds of one configuration."""
    rows = [run.per_step() for run in runs]
    parts: dict[str, dict[str, Any]] = {}
    for part in PARTS:
        cells = [r[part] for r in rows]
        device = [c["device_ms"] for c in cells if c["device_ms"] is not None]
        kinds = sorted({k for c in cells for k in c["syncs"]})
        parts[part] = {
            "host_ms": statistics.median(c["host_ms"] for c in cells),
            "device_ms": statistics.median(device) if device else None,
            "ops": statistics.fmean(c["ops"] for c in cells),
            "views": statistics.fmean(c["views"] for c in cells),
            "syncs": {k: statistics.fmean(c["syncs"].get(k, 0.0) for c in cells) for k in kinds},
        }
    names = sum((run.by_name for run in runs), start=type(runs[0].by_name)())
    counted = sum(run.counted_steps for run in runs) or 1
    return {
        "parts": parts,
        "step_s": statistics.median(statistics.fmean(run.step_seconds) for run in runs),
        "top": [(n, c / counted) for n, c in names.most_common(8)],
        "counted": any(run.counted_steps for run in runs),
    }


def _counts(summary: dict[str, Any], cells: str) -> str:
    """The operator cells, or dashes where no operator was counted (a captured mode)."""
    return cells if summary.get("counted", True) else "- | - | -"


def part_table(summary: dict[str, Any]) -> str:
    """Markdown table of one configuration's parts and their sum."""
    lines = [
        "| part | host ms/step | device ms/step | ops/step | of them view ops | syncs/step |",
        "|---|---:|---:|---:|---:|---|",
    ]
    total = {"host_ms": 0.0, "device_ms": None, "ops": 0.0, "views": 0.0, "syncs": {}}
    for part, cell in summary["parts"].items():
        device = "-" if cell["device_ms"] is None else f"{cell['device_ms']:.2f}"
        lines.append(
            f"| {part} | {cell['host_ms']:.2f} | {device} | "
            + _counts(summary, f"{cell['ops']:.1f} | {cell['views']:.1f} | {_syncs(cell['syncs'])}")
            + " |"
        )
        total["host_ms"] += cell["host_ms"]
        total["ops"] += cell["ops"]
        total["views"] += cell["views"]
        if cell["device_ms"] is not None:
            total["device_ms"] = (total["device_ms"] or 0.0) + cell["device_ms"]
        for k, v in cell["syncs"].items():
            total["syncs"][k] = total["syncs"].get(k, 0.0) + v
    device = "-" if total["device_ms"] is None else f"{total['device_ms']:.2f}"
    lines.append(
        f"| **step** | **{total['host_ms']:.2f}** | {device} | "
        + _counts(
            summary, f"**{total['ops']:.1f}** | {total['views']:.1f} | {_syncs(total['syncs'])}"
        )
        + " |"
    )
    return "\n".join(lines)


def _bare(net: str, settings: dict[str, Any]) -> tuple[BareStep, float]:
    """The bare network and the operators of one of its steps."""
    bare = BareStep(settings) if net == "resnet18" else TinyBareStep(settings)
    with OpCounter() as count:
        bare.forward_backward()  # the network's operators (not the optimiser's)
    return bare, float(count.ops)


def run(repeats: int = 3) -> list[Timing]:
    """Per-part tables (printed) and one row per method and pipeline (returned)."""
    net = network()
    threads = torch.get_num_threads()
    if net == "tiny" and not torch.cuda.is_available():
        torch.set_num_threads(TINY_THREADS)
    try:
        return _run(net, repeats)
    finally:
        torch.set_num_threads(threads)


def _run(net: str, repeats: int) -> list[Timing]:
    settings = settings_for(net)
    label = ", ".join(f"{k}={v}" for k, v in settings.items())
    label += f", threads={torch.get_num_threads()}"
    bare, bare_ops = _bare(net, settings)
    names = list(methods())
    rounds = max(1, repeats)
    configs = [(pipeline, mode) for pipeline in pipelines() for mode in pipeline_modes(pipeline)]
    runs: dict[tuple[str, str, str], list[StepParts]] = {}
    calls: dict[tuple[str, str, str], list[StepClock]] = {}
    local: dict[tuple[str, str, str], list[float]] = {}
    progress = Progress(len(configs) * rounds * len(names), "step")
    for pipeline, mode in configs:
        for r in range(rounds):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                key = (pipeline, mode, name)
                what = f"{name}, {mode} step, {pipeline} augmentation, round {r + 1}/{rounds}"
                with progress.unit(what):
                    first = len(bare.samples)
                    bare.measure(2)
                    parts = measure(name, pipeline, net, settings, mode)
                    bare.measure(2)
                    calls.setdefault(key, []).append(
                        python_calls(name, pipeline, net, settings, mode)
                    )
                runs.setdefault(key, []).append(parts)
                local.setdefault(key, []).append(
                    statistics.median(bare.samples[first:]) / statistics.fmean(parts.step_seconds)
                )
    progress.finish()
    bare_s = statistics.median(bare.samples)
    params = list(bare.model.parameters())
    print(
        f"\n## step: parts of one training step ({net} network, batch {BATCH_SIZE} x 2 views "
        f"of {IMAGE_SIZE}x{IMAGE_SIZE}, {label}; {TIMED} timed and {COUNTED} counted steps "
        f"after {WARMUP}, Python calls counted over {CALLS} steps; {rounds} round(s))\n\n"
        f"bare network (backbone + projector forward and backward, 2 x {BATCH_SIZE} views; "
        f"its samples include a LARS step): {1e3 * bare_s:.2f} ms, {bare_ops:.0f} ops; "
        f"CL model: {sum(p.numel() for p in params)} parameters in {len(params)} tensors",
        flush=True,
    )
    summary = [
        "| method | mode | pipeline | step ms | harness ms (step - bare network) "
        "| of it data ms | ops/step | outside the network | not views | syncs/step "
        "| Python calls / step | C calls / step | bare/full |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|",
    ]
    rows = [
        Timing(
            f"bare {net} backbone+projector fwd/bwd + LARS, 2 x {BATCH_SIZE} views ({label})",
            bare_s,
            note=f"{1e3 * bare_s:.2f} ms, {bare_ops:.0f} ops per step",
        )
    ]
    steps: dict[tuple[str, str, str], float] = {}
    for key, measured in runs.items():
        pipeline, mode, name = key
        result = _summarise(measured)
        steps[key] = step_s = result["step_s"]
        cells = result["parts"].values()
        ops, views = sum(c["ops"] for c in cells), sum(c["views"] for c in cells)
        kinds: dict[str, float] = {}
        for cell in cells:
            for k, v in cell["syncs"].items():
                kinds[k] = kinds.get(k, 0.0) + v
        counted = [c.calls_per_step() for c in calls[key]]
        py_calls = statistics.fmean(c[0] for c in counted if c is not None)
        c_calls = statistics.fmean(c[1] for c in counted if c is not None)
        top = ", ".join(f"{n} {c:.1f}" for n, c in result["top"])
        functions = ", ".join(f"{n} {c:.1f}" for n, c in calls[key][-1].top_functions(6))
        print(
            f"\n### {name}, {mode} step, {pipeline} augmentation\n\n{part_table(result)}\n\n"
            f"most frequent operators per step: {top}\n\n"
            f"Python calls per step: {py_calls:.0f} ({c_calls:.0f} C calls); most called: "
            f"{functions}",
            flush=True,
        )
        ratio = statistics.median(local[key])
        harness = 1e3 * (step_s - bare_s)
        data = result["parts"]["data"]["host_ms"]
        summary.append(
            f"| {name} | {mode} | {pipeline} | {1e3 * step_s:.2f} | {harness:.2f} | {data:.2f} | "
            + _counts(result, f"{ops:.1f} | {ops - bare_ops:.1f} | {ops - views:.1f}")
            + f" | {_syncs(kinds) if result['counted'] else '-'} "
            f"| {py_calls:.0f} | {c_calls:.0f} | {ratio:.3f} |"
        )
        counts = (
            f"{ops:.1f} ops/step, {ops - bare_ops:.1f} outside the network; syncs/step "
            f"{_syncs(kinds)}; "
            if result["counted"]
            else "operators not counted (captured); "
        )
        note = (
            f"{1e3 * step_s:.2f} ms/step, harness {harness:.2f} ms; {counts}"
            f"{py_calls:.0f} Python calls/step ({c_calls:.0f} C calls); bare/full {ratio:.3f}"
        )
        if name == "BayesNCL" and (pipeline, mode, "NCL") in steps:
            note += f"; {step_s / steps[pipeline, mode, 'NCL']:.3f} x NCL's step"
        rows.append(
            Timing(
                f"{name}, {mode} step, {pipeline} augmentation: training step", step_s, note=note
            )
        )
    print("\n### all configurations\n\n" + "\n".join(summary), flush=True)
    return rows


__all__ = ["TinyNet", "make_tiny", "measure", "part_table", "python_calls", "run"]
