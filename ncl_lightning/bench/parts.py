"""Where a training step's time and operators go, part by part, inside ``Trainer.fit``.

[`StepParts`][] is a callback that labels every moment of a training step with the part
of the step that runs then, by wrapping (for the run only) the methods that Lightning and
the module call for that part:

==============  ============================================================================
data            between two steps: the loader's next batch (on ``augment_on: cpu`` this
                waits for the views made in the workers), its transfer to the device and
                the loop's own work between batches
views           the DataModule's ``on_after_batch_transfer`` (``augment_on: device``)
forward         the module's ``encode`` (backbone, projector, feature map, gate)
loss            ``objective`` and the rest of ``training_step`` (float32 casts, the sum)
probe + kNN     the online probe's loss, its accuracy metric, the kNN bank update
guard           the non-finite guard: ``check_finite_later`` / ``loss_is_finite`` and the
                guard callback's hooks (its deferred verdict included)
backward        the strategy's ``backward`` (autograd through everything above)
optimizer       the optimiser's ``step`` (with ``zero_grad``) and the LR scheduler's
logging         ``self.log``/``log_dict`` and Lightning's logger connector (the CSV write)
loop            the rest: Lightning's hooks, closures and result bookkeeping
==============  ============================================================================

A step runs from the end of the previous one (the logger connector's
``update_train_step_metrics``, Lightning's last call for a batch) to its own end, so the
parts add up to the wall-clock step. After ``warmup`` steps, ``timed`` steps measure each
part's host seconds and, on a GPU, its device milliseconds (CUDA events recorded at the
part boundaries, read after the run: nothing waits inside the timed steps); then
``counted`` steps run under an [`OpCounter`][ncl_lightning.bench.counting.OpCounter] that
attributes every dispatched operator and sync-prone call to the running part (counted
apart from the timed steps: counting costs host time). A step during which an epoch ends
or starts (the epoch's metrics, the loader's restart) is left out and another one taken;
the callback stops the run when both windows are full.

With ``step_mode`` ``compiled`` or ``graphs`` the methods that run inside a captured graph
(``encode``, ``objective``, the probe...) are traced by ``torch.compile``, which sees
through the wrappers (``torch.compiler.is_compiling()``): the graph's time goes to the part
whose wrapper runs outside it (``loss`` for ``training_step``).
"""

from __future__ import annotations

import functools
import itertools
import time
from collections import Counter
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback

from ncl_lightning.bench.counting import OpCounter, Tally
from ncl_lightning.foundation.errors import UsageError
from ncl_lightning.foundation.internals import CLOSURE_WRAPPER, logger_connector
from ncl_lightning.foundation.validation import check_at_least
from ncl_lightning.methods.guard import NonFiniteGuard

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
    "loop",
)
GUARD_HOOKS = (
    "on_train_batch_start",
    "on_train_batch_end",
    "on_before_backward",
    "on_after_backward",
    "on_before_optimizer_step",
    "on_before_zero_grad",
)
_MISSING = object()


class StepParts(Callback):
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
        tallies: [`Tally`][ncl_lightning.bench.counting.Tally] of each part summed over the
            counted steps.
        total: The counted steps' whole [`Tally`][ncl_lightning.bench.counting.Tally]
            (the parts' tallies add up to it).
        by_name: Operators by name over the counted steps.
        counted_steps: Counted steps kept.
    """

    def __init__(
        self, warmup: int = 3, timed: int = 10, counted: int = 10, device_timing: bool | None = None
    ) -> None:
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
        self._marks: list[list[tuple[str, Any]]] = []  # kept timed steps' (part, event)
        self._patches: list[tuple[Any, str, Any]] = []
        self._running_trainer: L.Trainer | None = None
        self._reset_step("warmup", time.perf_counter())
        self._closed = 0

    @property
    def max_steps(self) -> int:
        """A ``max_steps`` for the Trainer: both windows and room for left-out steps."""
        return self.warmup + self.timed + self.counted + 8

    # -- the timeline -----------------------------------------------------------------
    def _reset_step(self, phase: str, now: float) -> None:
        self._phase, self._stack, self._last, self._start = phase, ["data"], now, now
        self._dirty = False
        self._step_host: dict[str, float] = dict.fromkeys(PARTS, 0.0)
        self._step_marks: list[tuple[str, Any]] = []
        self._counter: OpCounter | None = None
        if phase == "timed" and self.device_timing:
            self._mark("data")
        elif phase == "counted":
            self._counter = OpCounter().__enter__()
            self._counter.part = "data"

    def _mark(self, part: str) -> None:
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        self._step_marks.append((part, event))

    def _switch(self, change: Any) -> None:
        """Charge the time since the last switch to the running part, then ``change`` the
        stack of parts."""
        now = time.perf_counter()
        before = self._stack[-1]
        if self._phase == "timed":
            self._step_host[before] += now - self._last
        self._last = now
        change(self._stack)
        part = self._stack[-1]
        if part != before:
            if self._counter is not None:
                self._counter.part = part
            elif self._phase == "timed" and self.device_timing:
                self._mark(part)

    def _enter(self, part: str) -> None:
        self._switch(lambda stack: stack.append(part))

    def _leave(self, then: str | None = None) -> None:
        def change(stack: list[str]) -> None:
            stack.pop()
            if then is not None and len(stack) == 1:
                stack[0] = then

        self._switch(change)

    def _close_step(self) -> None:
        """End of a step: keep its figures unless an epoch boundary fell in it, choose the
        next step's phase."""
        self._switch(lambda stack: None)
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
                    self.tallies.setdefault(part, Tally()).add(tally)
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
            phase = "done"
            if self._running_trainer is not None:
                self._running_trainer.should_stop = True
        self._reset_step(phase, self._last)

    # -- wrapping ---------------------------------------------------------------------
    def _wrap(self, owner: Any, name: str, part: str, then: str | None = None) -> None:
        original = getattr(owner, name, None) if owner is not None else None
        if not callable(original):
            return
        parts = self

        @functools.wraps(original)
        def labelled(*args: Any, **kwargs: Any) -> Any:
            if torch.compiler.is_compiling():  # inside a captured step: one graph, no parts
                return original(*args, **kwargs)
            parts._enter(part)
            try:
                return original(*args, **kwargs)
            finally:
                parts._leave(then)

        self._patches.append((owner, name, vars(owner).get(name, _MISSING)))
        setattr(owner, name, labelled)

    def _install(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        self._wrap(trainer.datamodule, "on_after_batch_transfer", "views")
        self._wrap(trainer.strategy, "batch_to_device", "data", then="loop")
        self._wrap(module, "training_step", "loss")
        self._wrap(module, "encode", "forward")
        self._wrap(module, "objective", "loss")
        online = getattr(module, "online", None)
        for name in ("probe_loss", "add_to_bank"):
            self._wrap(online, name, "probe + kNN")
        self._wrap(getattr(module, "train_acc", None), "forward", "probe + kNN")
        self._wrap(module, "_online_updates", "probe + kNN")  # run by the guard, deferred
        guarded = ("loss_is_finite", "skipped_step_loss", "check_finite_later", "after_finite_step")
        for name in guarded:
            self._wrap(module, name, "guard")
        for callback in trainer.callbacks:
            if isinstance(callback, NonFiniteGuard):
                for name in (*GUARD_HOOKS, "check_loss", "check_loss_later", "after_finite"):
                    self._wrap(callback, name, "guard")
        for name in ("log", "log_dict"):
            self._wrap(module, name, "logging")
        connector = logger_connector(trainer)
        for name in ("on_batch_start", "on_batch_end"):
            self._wrap(connector, name, "logging")
        self._wrap(trainer.strategy, "backward", "backward")
        # optimizer.step runs Lightning's closure (zero_grad, training_step, backward, the
        # on_before_optimizer_step hooks) before its update: the closure's own work is loop.
        self._wrap(trainer.precision_plugin, CLOSURE_WRAPPER, "loop")
        for optimizer in trainer.optimizers:
            self._wrap(optimizer, "step", "optimizer")
            self._wrap(optimizer, "zero_grad", "optimizer")
        for config in trainer.lr_scheduler_configs:
            self._wrap(config.scheduler, "step", "optimizer")
        # Last: the step ends when the logger connector's update returns.
        self._wrap(connector, "update_train_step_metrics", "logging")
        update = connector.update_train_step_metrics

        @functools.wraps(update)
        def update_and_close(*args: Any, **kwargs: Any) -> Any:
            try:
                return update(*args, **kwargs)
            finally:
                self._close_step()

        connector.update_train_step_metrics = update_and_close

    def _uninstall(self) -> None:
        if self._counter is not None:
            self._counter.__exit__(None, None, None)
            self._counter = None
        for owner, name, saved in reversed(self._patches):
            if saved is _MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, saved)
        self._patches.clear()

    # -- hooks ------------------------------------------------------------------------
    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._running_trainer = trainer
        self._install(trainer, pl_module)
        self._reset_step("warmup", time.perf_counter())

    def on_train_epoch_start(self, *args: Any) -> None:
        self._dirty = True

    def on_train_epoch_end(self, *args: Any) -> None:
        self._dirty = True

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._uninstall()
        if self._marks:
            torch.cuda.synchronize()  # after the run: the events are all recorded
            self.device = dict.fromkeys(PARTS, 0.0)
            for marks in self._marks:
                for (part, start), (_, end) in itertools.pairwise(marks):
                    self.device[part] = self.device.get(part, 0.0) + start.elapsed_time(end)
            self._marks.clear()

    def on_exception(self, *args: Any) -> None:
        self._uninstall()

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


__all__ = ["PARTS", "StepParts"]
