"""Step timing that lets the host run ahead of the device, and what a step asks of Python.

On a GPU the host queues a step's kernels and goes on with the next step; a
``torch.cuda.synchronize()`` at every step boundary (what the throughput benchmark did
before issue 43) makes the host wait for the device each step and so hides that run-ahead,
the very thing a captured step (``torch.compile``, CUDA graphs) buys. [`EventTimer`][]
records a CUDA event at each step boundary instead and reads the events once, after the
last one: the device seconds per step are the elapsed time between the first and the last
timed boundary over the number of steps, and nothing waits inside the timed window. On a
CPU the same marks are the host clock (``time.perf_counter``).

A steady-state window measures throughput, not who is slower: when the device is the
bottleneck the host blocks on a full launch queue and runs at the device's pace. So
[`StepClock`][] also times a few *isolated* steps on a GPU: a synchronize before the step
(outside its window), then host seconds until the step's last hook returns (the time to
queue it) against device seconds until its work is done. Host < device means the step is
bound by the GPU; host ~ device means the GPU waited for the host.

[`StepClock`][] also counts, for a few steps after the timed ones, the Python function
calls of the training thread
([`PythonCallCounter`][benchmarks.counting.PythonCallCounter]) and, when the step
is compiled, what ``torch._dynamo`` compiled (graphs, graph breaks, and graphs compiled
inside the timed window, i.e. recompilations in the steady state).
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from typing import Any

import lightning as L
import torch

from benchmarks.counting import PythonCallCounter
from ncl_lightning.foundation.errors import UsageError
from ncl_lightning.foundation.validation import check_at_least


class EventTimer:
    """Marks at step boundaries: the host clock, and on a GPU a CUDA event each.

    Args:
        device_events: Record ``torch.cuda.Event`` s on the current stream (default: when
            CUDA is available). Without them the device figures are the host's.

    Attributes:
        host: ``time.perf_counter()`` at each mark.
        events: The CUDA events of the marks (empty without device events).
    """

    def __init__(self, device_events: bool | None = None) -> None:
        self.device_events = torch.cuda.is_available() if device_events is None else device_events
        self.host: list[float] = []
        self.events: list[Any] = []

    def __len__(self) -> int:
        return len(self.host)

    def mark(self) -> None:
        """A step boundary: queue an event (nothing waits) and read the host clock."""
        if self.device_events:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self.events.append(event)
        self.host.append(time.perf_counter())

    def wait(self) -> None:
        """Wait for the device (``torch.cuda.synchronize``): only between windows."""
        if self.device_events:
            torch.cuda.synchronize()

    def _span(self, first: int, last: int) -> tuple[int, int, int]:
        n = len(self.host)
        first, last = first % n if n else first, last % n if n else last
        if n < 2 or last <= first:
            raise UsageError(f"EventTimer: need two marks first < last, got {first}, {last} of {n}")
        return first, last, last - first

    def host_seconds(self, first: int = 0, last: int = -1) -> float:
        """Host seconds per step between marks ``first`` and ``last``."""
        first, last, steps = self._span(first, last)
        return (self.host[last] - self.host[first]) / steps

    def device_seconds(self, first: int = 0, last: int = -1) -> float | None:
        """Device seconds per step between the events of marks ``first`` and ``last``
        (``None`` without device events); waits for the ``last`` event, once."""
        if not self.events:
            return None
        first, last, steps = self._span(first, last)
        self.events[last].synchronize()
        return self.events[first].elapsed_time(self.events[last]) / 1e3 / steps

    def seconds(self, first: int = 0, last: int = -1) -> float:
        """Device seconds per step where there are events, else host seconds."""
        device = self.device_seconds(first, last)
        return self.host_seconds(first, last) if device is None else device

    def pairs(self) -> list[tuple[float, float | None]]:
        """(host, device) seconds of each pair of marks (0, 1), (2, 3)...: isolated steps."""
        return [
            (self.host_seconds(i, i + 1), self.device_seconds(i, i + 1))
            for i in range(0, len(self.host) - 1, 2)
        ]


def dynamo_counts() -> dict[str, int]:
    """``torch._dynamo``'s running totals: graphs compiled, graph breaks, frames (zeros
    when nothing was ever compiled in this process)."""
    utils = sys.modules.get("torch._dynamo.utils")
    if utils is None:
        return {"graphs": 0, "graph_breaks": 0, "frames": 0}
    counters = utils.counters
    return {
        "graphs": int(counters["stats"].get("unique_graphs", 0)),
        "graph_breaks": int(sum(counters["graph_break"].values())),
        "frames": int(counters["frames"].get("total", 0)),
    }


class StepClock(L.Callback):
    """Times a training run's steps with [`EventTimer`][]s, then counts Python calls.

    Step boundaries are the ends of training batches (``on_train_batch_end``, after the
    optimiser step). The run goes through, in order: ``warmup`` steps; ``timed`` steps in
    one steady window (``timed + 1`` marks, no wait); ``calls`` steps under a
    [`PythonCallCounter`][benchmarks.counting.PythonCallCounter], from the
    ``on_train_batch_start`` of the first to that of the step after the last (so they
    include the loop's work between batches and the loader's next batch); on a GPU, after
    that step, ``isolated`` steps, each after a synchronize. Give the Trainer
    ``max_steps = clock.max_steps``.

    Args:
        warmup: Steps before the timed window (compilation and CUDA-graph recording).
        timed: Steps of the steady window (0: none).
        isolated: Isolated steps (default: 3 with device events, else 0).
        calls: Steps whose Python calls are counted (0: none).
        device_events: As [`EventTimer`][].

    Attributes:
        steady: The steady window's marks.
        isolated_marks: The isolated steps' (start, end) marks.
        python: The counter of the ``calls`` steps (``None`` before they run).
        compiled: [`dynamo_counts`][] over the whole run (``graphs``, ``graph_breaks``,
            ``frames``) and ``graphs_in_window``: graphs compiled during the timed window.
    """

    def __init__(
        self,
        warmup: int = 3,
        timed: int = 8,
        isolated: int | None = None,
        calls: int = 0,
        device_events: bool | None = None,
    ) -> None:
        check_at_least("warmup", warmup, 1)
        check_at_least("timed", timed, 0)
        check_at_least("calls", calls, 0)
        self.steady = EventTimer(device_events)
        self.isolated_marks = EventTimer(self.steady.device_events)
        default_isolated = 3 if self.steady.device_events else 0
        self.isolated = default_isolated if isolated is None else isolated
        check_at_least("isolated", self.isolated, 0)
        self.warmup, self.timed, self.calls = warmup, timed, calls
        self.python: PythonCallCounter | None = None
        self.compiled: dict[str, int] = {}
        self._ended = self._started = 0
        self._counts: dict[str, dict[str, int]] = {}

    @property
    def _isolated_from(self) -> int:
        """Steps ended before the first isolated one starts."""
        calls = self.calls + 1 if self.calls else 0  # the step whose start ends the count
        return self.warmup + self.timed + calls

    @property
    def max_steps(self) -> int:
        """The Trainer's ``max_steps``: every window."""
        return self._isolated_from + self.isolated

    def on_train_start(self, *args: Any) -> None:
        self._counts["start"] = dynamo_counts()

    def on_train_batch_start(self, *args: Any) -> None:
        first = self.warmup + self.timed  # steps started before the counted ones
        if self.calls and self._started == first:
            self.python = PythonCallCounter().__enter__()
        elif self.python is not None and self._started == first + self.calls:
            self.python.__exit__(None, None, None)
        self._started += 1

    def on_train_batch_end(self, *args: Any) -> None:
        self._ended += 1
        n, window_end = self._ended, self.warmup + self.timed
        if self.timed and self.warmup <= n <= window_end:
            self.steady.mark()
            if n == self.warmup:
                self._counts["window"] = dynamo_counts()
            if n == window_end:
                self._counts["window_end"] = dynamo_counts()
        base = self._isolated_from
        if self.isolated and base <= n <= base + self.isolated:
            if n > base:
                self.isolated_marks.mark()  # the end of an isolated step
            if n < base + self.isolated:
                self.isolated_marks.wait()  # outside every window
                self.isolated_marks.mark()  # the start of the next one

    def on_train_end(self, *args: Any) -> None:
        if self.python is not None and self.python.active:
            self.python.__exit__(None, None, None)
        end = dynamo_counts()
        start = self._counts.get("start", end)
        self.compiled = {k: end[k] - start[k] for k in end}
        window, window_end = self._counts.get("window"), self._counts.get("window_end")
        if window is not None and window_end is not None:
            self.compiled["graphs_in_window"] = window_end["graphs"] - window["graphs"]

    def on_exception(self, *args: Any) -> None:
        if self.python is not None and self.python.active:
            self.python.__exit__(None, None, None)

    # -- results ----------------------------------------------------------------------
    def step_seconds(self) -> float:
        """Seconds per step of the steady window: device (events) on a GPU, else host."""
        return self.steady.seconds()

    def host_step_seconds(self) -> float:
        """Host seconds per step of the steady window."""
        return self.steady.host_seconds()

    def isolated_seconds(self) -> tuple[float, float | None] | None:
        """Median (host, device) seconds of the isolated steps, or ``None`` without."""
        pairs = self.isolated_marks.pairs()
        if not pairs:
            return None
        host = sorted(h for h, _ in pairs)[len(pairs) // 2]
        device = [d for _, d in pairs if d is not None]
        return host, (sorted(device)[len(device) // 2] if device else None)

    def calls_per_step(self) -> tuple[float, float] | None:
        """(Python calls, C calls) per counted step, or ``None`` when none were counted."""
        if self.python is None or not self.calls:
            return None
        return self.python.calls / self.calls, self.python.c_calls / self.calls

    def top_functions(self, n: int = 8) -> list[tuple[str, float]]:
        """The ``n`` Python functions called most often, per counted step."""
        if self.python is None or not self.calls:
            return []
        return [(name, c / self.calls) for name, c in self.python.top(n)]


def format_counts(counts: Counter[str] | dict[str, int]) -> str:
    """``graphs 3, graph breaks 0, compiled in the timed window 0`` (empty: eager)."""
    if not counts or not counts.get("frames"):
        return ""
    text = f"{counts['graphs']} graphs, {counts['graph_breaks']} graph breaks"
    if "graphs_in_window" in counts:
        text += f", {counts['graphs_in_window']} compiled in the timed window"
    return text


__all__ = ["EventTimer", "StepClock", "dynamo_counts", "format_counts"]
