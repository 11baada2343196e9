"""Where a training step's time and operators go, part by part, inside ``Trainer.fit``.

[`StepParts`][] is a Lightning ``Profiler`` (``Trainer(profiler=parts)``): Lightning calls
its ``start``/``stop`` around every hook, the data fetch, the transfer and the strategy's
``training_step`` and ``backward``, and [`instrument`][] makes a subclass of the method
whose ``encode``, ``objective``, logging, guard and online-update methods open a part of
their own. Each part is also a ``torch.profiler.record_function`` scope
([`scope`][benchmarks.counting.scope]) while operators are counted:

==============  ============================================================================
data            the loader's next batch (on ``augment_on: cpu`` this waits for the views
                made in the workers) and its transfer to the device
views           the DataModule's ``on_after_batch_transfer`` (``augment_on: device``)
forward         the module's ``encode`` (backbone, projector, feature map, gate)
loss            ``objective`` and the rest of ``training_step`` (the online probe's loss,
                float32 casts, the sum)
probe + kNN     the deferred online updates: the probe's accuracy metric, the kNN bank
guard           the non-finite guard: the module's finite checks and the guard callback's
                hooks
backward        the strategy's ``backward`` (autograd through everything above)
optimizer       ``optimizer_step`` (the LARS update and Lightning's closure around the
                step), ``optimizer_zero_grad`` and the LR scheduler's step
logging         ``self.log``/``log_dict`` of the module
callbacks       the other callbacks' hooks
loop            the rest: Lightning's own work between hooks (its logger writes included)
==============  ============================================================================

A step runs from the end of the previous one (the module's ``on_train_batch_end``) to its
own end, the innermost part takes the time, so the parts add up to the wall-clock step.
After ``warmup`` steps, ``timed`` steps measure each part's host seconds and, on a GPU, its
device milliseconds (CUDA events at the part boundaries, read after the run); then
``counted`` steps run each under an [`OpCounter`][benchmarks.counting.OpCounter] (a
``torch.profiler`` trace) that attributes every operator and sync-prone call to its part.
A step during which an epoch ends or starts is left out and another one taken; add
[`StepParts.stopper`][] to the callbacks to stop the run when both windows are full.

With ``step_mode`` ``compiled`` or ``graphs`` the methods inside a captured graph open no
part (``torch.compiler.is_compiling()``): the graph's time goes to the part around it.
"""

from __future__ import annotations

import contextlib
import itertools
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import lightning as L
import torch
from lightning.pytorch.profilers import Profiler

from benchmarks.counting import OpCounter, Tally, scope
from ncl_lightning.foundation.errors import UsageError
from ncl_lightning.foundation.validation import check_at_least

PARTS = (
    "data",
    "views",
    "forward",
    "loss",
    "probe + kNN",
    "guard",
    "backward",
    "optimizer",
    "logging",
    "callbacks",
    "loop",
)
# The module's methods that open a part (those the method has).
METHOD_PARTS = {
    "encode": "forward",
    "training_step": "loss",
    "objective": "loss",
    "_online_updates": "probe + kNN",
    "loss_is_finite": "guard",
    "skipped_step_loss": "guard",
    "check_finite_later": "guard",
    "after_finite_step": "guard",
    "log": "logging",
    "log_dict": "logging",
}


def part_of(action: str) -> str | None:
    """The part of a Lightning profiler action (``[Strategy]SingleDeviceStrategy.backward``),
    or ``None``: the action's time stays with the part around it."""
    hook = action.rsplit(".", 1)[-1]
    if action.startswith("[_TrainingEpochLoop].train_dataloader_next") or hook in (
        "batch_to_device",
        "transfer_batch_to_device",
        "on_before_batch_transfer",
    ):
        return "data"
    if hook == "on_after_batch_transfer":
        return "views"
    if action.startswith("[Strategy]") and hook in ("training_step", "backward"):
        return "loss" if hook == "training_step" else "backward"
    if action.startswith("[LightningModule]") and hook in (
        "optimizer_step",
        "optimizer_zero_grad",
        "lr_scheduler_step",
    ):
        return "optimizer"
    if action.startswith("[Callback]"):
        return "guard" if "Finite" in action.split(".", 1)[0] else "callbacks"
    return None


def instrument(method: type[L.LightningModule], parts: StepParts) -> type[L.LightningModule]:
    """A subclass of ``method`` whose [`METHOD_PARTS`][] methods run inside ``parts``."""

    def opening(name: str, part: str) -> Any:
        def run(self: Any, *args: Any, **kwargs: Any) -> Any:
            inner = getattr(super(subclass, self), name)
            if torch.compiler.is_compiling():  # inside a captured step: one graph
                return inner(*args, **kwargs)
            with parts.part(part):
                return inner(*args, **kwargs)

        run.__name__ = name
        return run

    body = {n: opening(n, p) for n, p in METHOD_PARTS.items() if hasattr(method, n)}
    subclass = type(method.__name__, (method,), body)
    return subclass


class StepParts(Profiler):
    """Host seconds, device milliseconds, operators and syncs of each part of a step.

    Args:
        warmup: Steps run before measuring (at least 1: the first step initialises).
        timed: Steps whose host (and device) time is measured.
        counted: Steps whose operators and syncs are counted, after the timed ones.
        device_timing: Record CUDA events (``torch.cuda.Event``) at the part boundaries on
            the current stream (default: when CUDA is available).

    Attributes:
        step_seconds: Wall-clock seconds of each timed step.
        host: Seconds of each part summed over the timed steps.
        device: Device milliseconds of each part summed over the timed steps (GPU only).
        tallies: [`Tally`][benchmarks.counting.Tally] of each part summed over the counted
            steps.
        total: The counted steps' whole [`Tally`][benchmarks.counting.Tally] (the parts'
            tallies add up to it).
        by_name: Operators by name over the counted steps.
        counted_steps: Counted steps kept.
        done: Both windows are full.
    """

    def __init__(
        self, warmup: int = 3, timed: int = 10, counted: int = 10, device_timing: bool | None = None
    ) -> None:
        super().__init__()
        check_at_least("warmup", warmup, 1)
        check_at_least("timed", timed, 1)
        check_at_least("counted", counted, 0)
        self.warmup, self.timed, self.counted = warmup, timed, counted
        self.device_timing = torch.cuda.is_available() if device_timing is None else device_timing
        self.step_seconds: list[float] = []
        self.host: dict[str, float] = dict.fromkeys(PARTS, 0.0)
        self.device: dict[str, float] = {}
        self.tallies: dict[str, Tally] = {p: Tally() for p in PARTS}
        self.total = Tally()
        self.by_name: Counter[str] = Counter()
        self.counted_steps = 0
        self.done = False
        self._marks: list[list[tuple[str, Any]]] = []  # kept timed steps' (part, event)
        self._scopes: list[contextlib.ExitStack] = []
        self._closed = 0
        self._reset_step("warmup", time.perf_counter())

    @property
    def max_steps(self) -> int:
        """A ``max_steps`` for the Trainer: both windows and room for left-out steps."""
        return self.warmup + self.timed + self.counted + 8

    @property
    def stopper(self) -> L.Callback:
        """A callback that stops the run once [`done`][]."""
        parts = self

        class StopWhenDone(L.Callback):
            def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
                trainer.should_stop = trainer.should_stop or parts.done

        return StopWhenDone()

    # -- the timeline -----------------------------------------------------------------
    def _reset_step(self, phase: str, now: float) -> None:
        self._phase, self._stack, self._last, self._start = phase, ["loop"], now, now
        self._dirty = False
        self._step_host: dict[str, float] = dict.fromkeys(PARTS, 0.0)
        self._step_marks: list[tuple[str, Any]] = []
        self._counter: OpCounter | None = None
        if phase == "timed" and self.device_timing:
            self._mark("loop")
        elif phase == "counted":
            self._counter = OpCounter().__enter__()

    def _mark(self, part: str) -> None:
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        self._step_marks.append((part, event))

    def _push(self, part: str) -> None:
        now = time.perf_counter()
        before = self._stack[-1]
        if self._phase == "timed":
            self._step_host[before] += now - self._last
        self._last = now
        self._stack.append(part)
        scopes = contextlib.ExitStack()
        if self._counter is not None:
            scopes.enter_context(scope(part))
        self._scopes.append(scopes)
        if part != before and self._phase == "timed" and self.device_timing:
            self._mark(part)

    def _pop(self) -> None:
        now = time.perf_counter()
        part = self._stack.pop()
        if self._phase == "timed":
            self._step_host[part] += now - self._last
        self._last = now
        self._scopes.pop().close()
        if part != self._stack[-1] and self._phase == "timed" and self.device_timing:
            self._mark(self._stack[-1])

    @contextlib.contextmanager
    def part(self, name: str) -> Iterator[None]:
        """Charge what runs inside to part ``name``."""
        self._push(name)
        try:
            yield
        finally:
            self._pop()

    def _close_step(self) -> None:
        """End of a step: keep its figures unless an epoch boundary fell in it, choose the
        next step's phase."""
        self._push("loop")
        self._pop()  # charges the time since the last boundary
        kept = not self._dirty
        if self._phase == "timed" and kept:
            for part, seconds in self._step_host.items():
                self.host[part] += seconds
            self.step_seconds.append(self._last - self._start)
            if self.device_timing:
                self._mark("end")
                self._marks.append(self._step_marks)
        elif self._phase == "counted" and self._counter is not None:
            self._counter.__exit__(None, None, None)
            if kept:
                for part, tally in self._counter.parts.items():
                    self.tallies.setdefault(part or "loop", Tally()).add(tally)
                self.total.add(Tally(self._counter.ops, self._counter.views, self._counter.syncs))
                self.by_name.update(self._counter.by_name)
                self.counted_steps += 1
        self._closed += 1
        if self._closed < self.warmup:
            phase = "warmup"
        elif len(self.step_seconds) < self.timed:
            phase = "timed"
        elif self.counted_steps < self.counted:
            phase = "counted"
        else:
            phase, self.done = "done", True
        self._reset_step(phase, self._last)

    # -- the Profiler interface -------------------------------------------------------
    def start(self, action_name: str) -> None:
        part = part_of(action_name)
        if part is not None:
            self._push(part)

    def stop(self, action_name: str) -> None:
        if part_of(action_name) is not None and len(self._stack) > 1:
            self._pop()
        hook = action_name.rsplit(".", 1)[-1]
        if hook in ("on_train_epoch_start", "on_train_epoch_end"):
            self._dirty = True
        elif action_name.startswith("[LightningModule]") and hook == "on_train_batch_end":
            self._close_step()

    def summary(self) -> str:
        return ""

    def teardown(self, stage: str | None) -> None:
        super().teardown(stage)
        if self._counter is not None:
            self._counter.__exit__(None, None, None)
            self._counter = None
        if self._marks:
            torch.cuda.synchronize()  # after the run: the events are all recorded
            self.device = dict.fromkeys(PARTS, 0.0)
            for marks in self._marks:
                for (part, start), (_, end) in itertools.pairwise(marks):
                    self.device[part] = self.device.get(part, 0.0) + start.elapsed_time(end)
            self._marks.clear()

    # -- results ----------------------------------------------------------------------
    def per_step(self) -> dict[str, dict[str, Any]]:
        """Per part: host ms, device ms (``None`` without a GPU), operators, views and
        syncs by kind, each per step (means over the timed and the counted steps).

        Raises:
            UsageError: No step was timed (the run stopped before the timed window).
        """
        timed, counted = len(self.step_seconds), max(self.counted_steps, 1)
        if not timed:
            raise UsageError(
                f"StepParts: no timed step (the run ended after {self._closed} steps; "
                f"warmup {self.warmup}): give the Trainer max_steps >= {self.max_steps}"
            )
        rows = {}
        for part in PARTS:
            tally = self.tallies.get(part, Tally())
            device = self.device.get(part) if self.device else None
            rows[part] = {
                "host_ms": 1e3 * self.host[part] / timed,
                "device_ms": None if device is None else device / timed,
                "ops": tally.ops / counted,
                "views": tally.views / counted,
                "syncs": {k: v / counted for k, v in sorted(tally.syncs.items())},
            }
        return rows


__all__ = ["METHOD_PARTS", "PARTS", "StepParts", "instrument", "part_of"]
