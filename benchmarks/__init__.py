"""Benchmarks: ``python -m benchmarks [NAME ...]`` from the checkout (``make bench`` runs
them all). Not part of the installed package.

Each benchmark is a module of this folder with a ``run(repeats: int) -> list[Timing]``
function, listed below under a short name; adding one is a new module plus one line of
``BENCHMARKS``. Results are printed as a table and recorded in ``docs/performance.md``.
Nothing here asserts timings: tests stay machine-independent.
"""

from __future__ import annotations

import importlib
import os
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ncl_lightning.foundation.validation import check_at_least


@dataclass(frozen=True)
class Timing:
    """One measured row: what was timed, the median wall-clock seconds and an optional goal.

    Attributes:
        what: Description of the timed work.
        seconds: Median wall-clock time over the repeats, in seconds.
        goal: Upper bound the time should stay under, or ``None`` when only reported.
        note: Extra information (a metric value, how a figure was extrapolated, ...).
    """

    what: str
    seconds: float
    goal: float | None = None
    note: str = ""

    @property
    def met(self) -> bool | None:
        """Whether ``seconds < goal`` (``None`` without a goal)."""
        return None if self.goal is None else self.seconds < self.goal


# name -> module of this folder whose ``run(repeats)`` it is (imported when it runs)
BENCHMARKS = {
    "metrics": "metrics",
    "step": "step_parts",
    "step-ratio": "step",
    "throughput": "throughput",
    "views-224": "views_224",
    "step-224": "step_224",
    "switches": "speed_settings",
    "startup": "startup",
    "atlas": "atlas",
}


def run_benchmark(name: str, repeats: int) -> list[Timing]:
    """The rows of benchmark ``name`` (a key of ``BENCHMARKS``)."""
    return importlib.import_module(f"{__name__}.{BENCHMARKS[name]}").run(repeats)


def median_seconds(fn: Callable[[], object], repeats: int, warmup: int = 1) -> float:
    """Median wall-clock seconds of ``fn()`` over ``repeats`` calls after ``warmup`` calls.

    The warm-up absorbs one-off costs (first-touch page faults of fresh buffers, lazy
    initialisation of kernels) that would otherwise dominate the first call.
    """
    check_at_least("repeats", repeats, 1)
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def machine_info() -> str:
    """One line: CPU count and model, torch version and intra-op threads, GPU if any."""
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
    return (
        f"cpus={os.cpu_count()} ({platform.processor() or platform.machine()}), "
        f"torch={torch.__version__}, threads={torch.get_num_threads()}, "
        f"python={platform.python_version()}, gpu={gpu}"
    )


def format_table(rows: list[Timing]) -> str:
    """Markdown table ``| what | seconds | goal | met? | note |`` of the timings."""
    lines = ["| what | seconds | goal (s) | met? | note |", "|---|---:|---:|:---:|---|"]
    for row in rows:
        goal = "-" if row.goal is None else f"< {row.goal:g}"
        met = "-" if row.met is None else ("yes" if row.met else "NO")
        lines.append(f"| {row.what} | {row.seconds:.2f} | {goal} | {met} | {row.note} |")
    return "\n".join(lines)
