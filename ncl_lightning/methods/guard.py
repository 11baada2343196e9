"""The [`NonFiniteGuard`][] callback: what a training step does with a NaN or infinite
loss, gradient, BatchNorm statistic or parameter: stop with a checkpoint, or skip.

Every trainable module ([`TrainableModule`][ncl_lightning.methods.TrainableModule]) takes
``nonfinite_loss`` and hands its loss to this callback in the training step (``ncl-cli``
installs it; a plain ``Trainer`` gets it from the module's ``configure_callbacks``):

* ``stop`` (default): the weights of the last finite state are saved to
  ``last-finite.ckpt`` beside the run's checkpoints and training stops with
  [`NonFiniteLossError`][ncl_lightning.foundation.errors.NonFiniteLossError], one line naming the
  step, the epoch, the batch and the file.
* ``skip``: the batch changes nothing (weights, optimiser state, buffers, probe metrics,
  kNN bank); ``train/skipped_nonfinite`` counts skipped batches, one warning per epoch.
  ``skip`` is meant for a rare bad batch: a run that skips every batch of an epoch,
  [`CONSECUTIVE_SKIP_LIMIT`][] batches in a row, or every batch it ran, stops all the same.

A finite loss is also refused when its gradients are not finite or, with
``grad_norm_limit``, too large (under a ``GradScaler`` non-finite gradients are the
scaler's business). A parameter made non-finite by a step from finite gradients ends
training under both modes, without a checkpoint. Under DDP the ranks max-reduce the
verdict, so they all stop, or all skip, at the same step; a skipped batch still returns a
zero loss connected to every parameter (DDP needs the same backward on every rank), and
Lightning still counts its step.

Two ways to check, with the same guarantees (the site's reliability page, "Numerical
faults", details them): **deferred** ([`NonFiniteGuard.check_loss_later`][], the
self-supervised methods): a code is computed and agreed on the device, the weights and
optimiser state copied before the step
(``rollback.StepSnapshot``), the code copied to pinned
host memory ([`Verdict`][]) and read at the start of the next batch (or before validation,
a checkpoint, the end of an epoch or of training) by [`NonFiniteGuard.resolve`][], which
undoes a non-finite batch; no host synchronisation in the step. **Immediate**
([`NonFiniteGuard.check_loss`][], the NCE classifier, whose per-step metrics are logged in
the step): one host synchronisation in the training step and one before the optimiser step.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor, nn

from ncl_lightning.foundation.errors import NonFiniteLossError
from ncl_lightning.foundation.internals import attached_trainer, batch_index
from ncl_lightning.foundation.options import NonFiniteLoss
from ncl_lightning.foundation.protocols import FiniteCheckHost
from ncl_lightning.methods.faults import (
    BUFFER,
    GRAD_ABOVE_LIMIT,
    GRAD_NONFINITE,
    LOSS_INF,
    LOSS_NAN,
    LOSS_SCALE,
    PARAMETER,
    describe_gradients,
    describe_loss,
    last_finite_path,
    nonfinite_parameter_error,
    where,
)
from ncl_lightning.methods.rollback import StepSnapshot

CHECKPOINT_KEY = "nonfinite_skipped"
HINT = "set model.init_args.nonfinite_loss: skip to skip such batches"
CONSECUTIVE_SKIP_LIMIT = 100
"""Skipped batches in a row that stop a ``skip`` run: no rare bad batch any more."""
MAX_PENDING = 2
"""Captured steps whose verdict may still be on its way to the host: the guard judges a
verdict once it is ready, and waits for the oldest only past this many."""


# -- the codes, computed on the device ------------------------------------------------
def checked(
    params: Iterable[Tensor], buffers: Iterable[Tensor]
) -> tuple[list[Tensor], list[Tensor]]:
    """The floating, non-empty parameters and buffers: what must stay finite."""
    params = [p for p in params if p.is_floating_point() and p.numel()]
    return params, [b for b in buffers if b.is_floating_point() and b.numel()]


def loss_code(
    module: nn.Module, value: Tensor, tensors: tuple[list[Tensor], list[Tensor]] | None = None
) -> Tensor:
    """The loss check's code ``[]``: loss, then parameters and buffers (one multi-tensor
    max-norm over both); ``tensors``: ``module``'s [`checked`][] tensors, when listed."""
    code = torch.where(
        value.isnan().any(), LOSS_NAN, torch.where(value.isinf().any(), LOSS_INF, 0.0)
    ).float()
    params, buffers = tensors or checked(module.parameters(), module.buffers())
    if params or buffers:
        norms = torch.stack(torch._foreach_norm(params + buffers, float("inf")))
        for part, bad in ((norms[: len(params)], PARAMETER), (norms[len(params) :], BUFFER)):
            if part.numel():
                code = torch.maximum(code, torch.where(part.max().isfinite(), 0.0, bad))
    return code


def grad_code(grads: list[Tensor], limit: float | None, scaled: bool = False) -> Tensor:
    """The gradient check's code ``[]`` over ``grads`` (not empty): a non-finite norm
    (unless a ``GradScaler`` handles it: ``scaled``), a norm above ``limit``."""
    total = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)).float())
    finite = total.isfinite()
    code = torch.zeros_like(total) if scaled else torch.where(finite, 0.0, GRAD_NONFINITE)
    if limit is not None:
        code = torch.maximum(code, torch.where(finite & (total > limit), GRAD_ABOVE_LIMIT, 0.0))
    return code


def position(trainer: L.Trainer | None) -> tuple[int, int, int] | None:
    """``(step, epoch, batch)`` of the batch being trained (named only on a fault:
    [`where`][ncl_lightning.methods.faults.where])."""
    if trainer is None:
        return None
    return trainer.global_step, trainer.current_epoch, batch_index(trainer)


# -- the verdict on its way to the host -------------------------------------------------
@dataclass
class Verdict:
    """The code of one step on its way to the host, and what waits on it.

    Attributes:
        at: ``(step, epoch, batch)`` of the step ([`position`][]), named in the messages.
        stepped: Whether the optimiser stepped in that batch (a snapshot to restore).
        effects: Callables to run once the step is known to be finite (adding the batch
            to the kNN bank, updating the online probe's training accuracy).
        loss: The step's loss, to name its value in a message.
    """

    at: tuple[int, int, int] | None
    stepped: bool
    effects: list[Callable[[], None]] = field(default_factory=list)
    loss: Tensor | None = None
    _host: Tensor | None = None
    _event: Any = None

    @property
    def where(self) -> str:
        """``step S (epoch E, batch B)``."""
        return where(self.at)

    def publish(self, code: Tensor) -> None:
        """Start the copy of ``code`` (a 0-d device tensor) to pinned host memory."""
        if code.device.type == "cuda":
            self._host = torch.empty((), dtype=code.dtype, pin_memory=True)
            self._host.copy_(code, non_blocking=True)
            self._event = torch.cuda.Event()
            self._event.record()
        else:
            self._host = code.detach().clone()

    def ready(self) -> bool:
        """Whether the device has written the code (``read`` would not wait)."""
        return self._event is None or bool(self._event.query())

    def read(self) -> float:
        """The code, once the device has written it (long done by the next batch)."""
        if self._event is not None:
            self._event.synchronize()
        if self._host is None:
            return 0.0
        return float(self._host.numpy())  # host memory: no device synchronisation


@runtime_checkable
class GuardedModule(Protocol):
    """What the guard reads and sets on a module (a [`TrainableModule`][] has it)."""

    nonfinite_loss: NonFiniteLoss
    grad_norm_limit: float | None
    last_step_skipped: bool
    captures_step: bool


class NonFiniteGuard(Callback):
    """Stop or skip on a non-finite loss, gradient, buffer or parameter (module docstring).

    The module's training step ends with::

        if not self.check_finite_later(loss):  # or loss_is_finite: checked at once
            return self.skipped_step_loss()
        self.after_finite_step(lambda: ...)  # what a skipped batch must not change
        return loss  # after logging

    which call [`check_loss_later`][] ([`check_loss`][]) and [`after_finite`][] of
    the guard the module was given: the guard attaches itself at ``setup``
    ([`FiniteCheckHost`][ncl_lightning.foundation.protocols.FiniteCheckHost]).
    Modules without ``nonfinite_loss``, ``grad_norm_limit`` and ``last_step_skipped``
    ([`GuardedModule`][]) are left alone.

    Attributes:
        skipped_total: Batches skipped over the run (saved in checkpoints, restored on
            resume).
    """

    def __init__(self) -> None:
        self.skipped_total = 0
        self._skipped_epoch = self._batches_epoch = 0  # skipped / run in the current epoch
        self._skipped_run = self._batches_run = 0  # ... and in this run (this process)
        self._in_a_row = 0  # batches skipped since the last one known to be finite
        self._last_skip = ""  # what the last skipped batch had, and where
        self._skipped_since_step = 0  # micro-batches since the last optimiser step, skipped ...
        self._finite_since_step = 0  # ... and finite
        self._skips_before_batch = 0
        self._unlogged_skip = False
        # Read once per fit, not per hook: the module's kind and the trainer's scaler.
        self._guarded = self._captures = self._scaled = False
        self._tensors: tuple[Any, ...] | None = None
        # The deferred check (check_loss_later): this batch's code and effects, and the
        # verdicts of earlier batches, read at the start of the next one.
        self._code: Tensor | None = None
        self._loss: Tensor | None = None
        self._effects: list[Callable[[], None]] = []
        self._pending: Verdict | None = None
        self._queue: deque[Verdict] = deque()  # captured steps' verdicts, oldest first
        self._snapshot = StepSnapshot()

    # -- set-up, once per fit -----------------------------------------------------------
    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        """Attach to the module: its training steps call this guard."""
        self._tensors = None
        self._guarded = isinstance(pl_module, GuardedModule)  # a runtime Protocol: costly
        if isinstance(pl_module, FiniteCheckHost):
            pl_module.attach_finite_check(self)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """List the module's tensors anew (the strategy has set the module up) and read
        whether its step is captured (decided at ``on_fit_start``)."""
        self._tensors = None
        self._captures = self._guarded and bool(pl_module.captures_step)  # type: ignore[attr-defined]
        self._scaled = getattr(trainer.precision_plugin, "scaler", None) is not None

    def _listed(self, module: nn.Module) -> tuple[Any, ...]:
        """``module``'s parameters, buffers and [`checked`][] tensors, listed at its first
        training batch of the fit (a walk of the module tree costs thousands of Python
        calls: not every step)."""
        if self._tensors is None or self._tensors[0] is not module:
            params, buffers = list(module.parameters()), list(module.buffers())
            self._tensors = (module, params, buffers, checked(params, buffers))
        return self._tensors[1:]

    def _agree(self, trainer: L.Trainer | None, code: Tensor) -> Tensor:
        """The largest ``code`` over the ranks (on the device)."""
        if trainer is not None and trainer.world_size > 1:
            code = trainer.strategy.reduce(code, reduce_op="max")
        return code

    # -- per batch ------------------------------------------------------------------------
    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        """Judge the previous batches (deferred check), then copy the buffers, to restore
        them if this batch is not finite (a captured step does that in its graph)."""
        if not self._guarded:
            return
        self.resolve(trainer, pl_module, wait=not self._captures)
        self._skips_before_batch = self.skipped_total
        if not self._captures:
            self._snapshot.take_buffers(self._listed(pl_module)[1])

    def check_loss(self, module: L.LightningModule, loss: Tensor) -> bool:
        """``True`` when ``loss``, the buffers and the parameters are finite on every rank;
        otherwise stop or skip (non-finite parameters always stop).

        One host synchronisation per step (and one small all-reduce under DDP).

        Args:
            module: The module whose training step computed ``loss`` (a
                [`GuardedModule`][]).
            loss: The step's loss (a scalar, or any tensor whose elements must be finite).

        Raises:
            NonFiniteLossError: Under ``nonfinite_loss: stop``, after saving the last finite
                state (every rank takes part in the save); under both modes for a parameter
                that an earlier optimiser step made non-finite.
        """
        value = loss.detach()
        trainer = attached_trainer(module)
        flag = int(self._agree(trainer, loss_code(module, value)).item())
        if flag == 0:
            self._finite_since_step += 1
            return True
        if flag == PARAMETER:
            raise nonfinite_parameter_error(module, where(position(trainer)))
        self._snapshot.restore_buffers()
        return self._skip_or_stop(module, describe_loss(flag, value, module))

    def check_loss_later(self, module: L.LightningModule, loss: Tensor) -> bool:
        """[`check_loss`][] without waiting: the code is computed on the device and the
        verdict read at the start of the next batch ([`resolve`][]), which stops or
        skips as [`check_loss`][] would, after putting back the weights, optimiser state
        and buffers from before this batch. Returns ``True``; without a trainer (a step
        called by hand, nothing to undo later) it is [`check_loss`][]."""
        if attached_trainer(module) is None:
            return self.check_loss(module, loss)
        value = loss.detach()
        code = LOSS_SCALE * loss_code(module, value, self._listed(module)[2])
        self._code = code if self._code is None else torch.maximum(self._code, code)
        self._loss = value
        return True

    def after_finite(self, effect: Callable[[], None]) -> None:
        """Run ``effect`` once this batch is known to be finite (at once, without a deferred
        check in this batch); dropped if it is not. For what a skipped batch must not
        change and nothing reads before the next batch: the kNN bank, training metrics."""
        if self._code is None:
            effect()
        else:
            self._effects.append(effect)

    def captured_verdict(
        self, module: L.LightningModule, code: Tensor, effect: Callable[[], None] | None
    ) -> None:
        """A captured step's code ``[]`` (already agreed over the ranks, and already used on
        the device to leave the weights, optimiser state and buffers as they were if it is
        not 0), on its way to the host; ``effect`` runs once it is read as finite. Judged
        when ready ([`resolve`][]): no host wait in the step."""
        verdict = Verdict(position(module.trainer), False, [effect] if effect else [], None)
        verdict.publish(code)
        self._queue.append(verdict)

    def on_before_optimizer_step(
        self, trainer: L.Trainer, pl_module: L.LightningModule, optimizer: torch.optim.Optimizer
    ) -> None:
        """Check the gradients; drop them when every batch since the last step was skipped
        (or the gradients are skipped now), so the optimiser moves nothing: no momentum,
        weight decay or moment update. Sets the module's ``last_step_skipped``.

        After a deferred check ([`check_loss_later`][]) nothing is decided here: the
        gradient code joins the batch's code, the weights and optimiser state are copied
        and the verdict goes to the host, to be read at the start of the next batch."""
        if not self._guarded or self._captures:
            return  # a captured step judges its gradients in its own graph
        limit = pl_module.grad_norm_limit  # type: ignore[attr-defined]
        if self._code is not None:
            params = self._listed(pl_module)[0]
            grads = [p.grad for p in params if p.grad is not None]
            if grads:
                self._code = torch.maximum(self._code, grad_code(grads, limit, self._scaled))
            self._snapshot.take(pl_module, optimizer, params)
            self._publish(trainer, self._code, stepped=True)
            pl_module.last_step_skipped = False
            return
        skipped = self._skipped_since_step > 0 and self._finite_since_step == 0
        if not skipped:  # one host synchronisation (and one small all-reduce under DDP)
            grads = [p.grad for p in pl_module.parameters() if p.grad is not None]
            code = grad_code(grads, limit, self._scaled) if grads else None
            flag = 0 if code is None else int(self._agree(trainer, code).item())
            if flag:
                self._snapshot.restore_buffers()
                skipped = not self._skip_or_stop(pl_module, describe_gradients(flag, pl_module))
        pl_module.last_step_skipped = skipped  # type: ignore[attr-defined]
        if skipped:
            for group in optimizer.param_groups:
                for p in group["params"]:
                    p.grad = None
        self._skipped_since_step = self._finite_since_step = 0

    def _publish(self, trainer: L.Trainer, code: Tensor, stepped: bool) -> None:
        """Agree on ``code`` over the ranks (on the device) and send it to the host."""
        verdict = Verdict(position(trainer), stepped, self._effects, self._loss)
        verdict.publish(self._agree(trainer, code))
        self._pending, self._code, self._loss, self._effects = verdict, None, None, []

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any
    ) -> None:
        """Send the verdict of a deferred micro-batch that did not step the optimiser
        (gradient accumulation), and log a skip found at the start of this batch."""
        if self._code is not None:
            self._publish(trainer, self._code, stepped=False)
        if self._guarded:
            self._batches_epoch += 1
            self._batches_run += 1
            deferred = self._pending is not None or bool(self._queue)  # judged later
            if not deferred and self.skipped_total == self._skips_before_batch:
                self._in_a_row = 0
        if self._unlogged_skip:
            self._log_skips(pl_module)

    # -- reading the verdicts -------------------------------------------------------------
    def resolve(self, trainer: L.Trainer, module: L.LightningModule, wait: bool = True) -> bool:
        """Read the verdicts of the deferred batches: run their effects if they were finite;
        otherwise put back the weights, optimiser state and buffers from before it (a
        captured step left them unchanged on the device), and stop or skip as the
        immediate checks do (``True``: a batch was undone). Called at the start of every
        batch, before validation and checkpoints, and at the end of an epoch and of
        training. ``wait=False`` (captured steps) judges only the verdicts that are ready,
        and waits for the oldest only when more than ``MAX_PENDING`` are on their way."""
        undone = False
        while self._queue:
            if not wait and len(self._queue) <= MAX_PENDING and not self._queue[0].ready():
                break
            undone |= self._judge(trainer, module, self._queue.popleft(), captured=True)
        verdict, self._pending = self._pending, None
        if verdict is not None:
            undone |= self._judge(trainer, module, verdict, captured=False)
        return undone

    def _judge(
        self, trainer: L.Trainer, module: L.LightningModule, verdict: Verdict, captured: bool
    ) -> bool:
        flag = verdict.read()
        if flag == 0:
            if captured:
                module.last_step_skipped = False  # type: ignore[attr-defined]
            self._in_a_row = 0
            for effect in verdict.effects:
                effect()
            return False
        if captured:  # nothing to undo: the step's graphs left everything as it was
            module.last_step_skipped = True  # type: ignore[attr-defined]
            if module.nonfinite_loss != "skip":  # type: ignore[attr-defined]
                self._queue.clear()  # stopping: later verdicts are moot
        elif verdict.stepped:  # also what a non-finite parameter is named from
            for optimizer in trainer.optimizers:
                self._snapshot.restore(optimizer)
            module.last_step_skipped = True  # type: ignore[attr-defined]
        else:  # a micro-batch of an accumulation window: the window's gradients go
            for p in module.parameters():
                p.grad = None
        if flag >= LOSS_SCALE and flag / LOSS_SCALE == PARAMETER:
            raise nonfinite_parameter_error(module, verdict.where)
        if flag >= LOSS_SCALE:
            what = describe_loss(flag / LOSS_SCALE, verdict.loss, module)
        else:
            what = describe_gradients(flag, module)
        if not captured:
            self._snapshot.restore_buffers()
        self._unlogged_skip = module.nonfinite_loss == "skip"  # type: ignore[attr-defined]
        self._skip_or_stop(module, what, verdict.where, log=False)
        return True

    def judge_pending(self, module: L.LightningModule) -> None:
        """Read the deferred verdict now: called by the module before Lightning sets its
        gradients to ``None`` for validation, so a non-finite gradient can be named."""
        if self._guarded:
            self.resolve(module.trainer, module)

    # -- skip or stop ---------------------------------------------------------------------
    def _skip_or_stop(
        self, module: L.LightningModule, what: str, at: str | None = None, log: bool = True
    ) -> bool:
        """Count a skip and return ``False`` (``nonfinite_loss: skip``), or save the last
        finite state and raise ``NonFiniteLossError("<what> at step ...")``."""
        trainer = attached_trainer(module)
        located = at is not None or trainer is not None
        place = f"at {at or where(position(trainer))}" if located else "in training_step"
        fault = f"{what} {place}"
        if module.nonfinite_loss != "skip":  # type: ignore[attr-defined]
            self._stop(module, fault, HINT)
        self._skipped_since_step += 1
        self.skipped_total += 1
        self._skipped_epoch += 1
        self._skipped_run += 1
        self._in_a_row += 1
        self._last_skip = fault
        if log:
            self._log_skips(module)
        if self._in_a_row >= CONSECUTIVE_SKIP_LIMIT:
            self._stop_skipping(module, f"{self._in_a_row} batches in a row")
        return False

    def _log_skips(self, module: L.LightningModule) -> None:
        self._unlogged_skip = False
        module.log(
            "train/skipped_nonfinite",
            float(self.skipped_total),
            on_step=False,
            on_epoch=True,
            reduce_fx="max",
            sync_dist=True,
        )

    def _stop(self, module: L.LightningModule, what: str, hint: str) -> None:
        """Save the last finite state (every rank takes part) and raise."""
        trainer = attached_trainer(module)
        if trainer is None:
            raise NonFiniteLossError(f"{what}; {hint}")
        path = last_finite_path(trainer)
        trainer.save_checkpoint(path)  # collective: every rank calls it, rank 0 writes
        raise NonFiniteLossError(
            f"{what}; training stopped; last finite state saved to {path}; {hint}"
        )

    def _stop_skipping(self, module: L.LightningModule, how_many: str) -> None:
        self._stop(
            module,
            f"nonfinite_loss: skip skipped {how_many}, nothing trained (last: {self._last_skip})",
            "a fault in every batch is no rare bad batch: fix its cause (a temperature or "
            "learning rate too small or too large, the data) rather than skip it",
        )

    # -- epoch, training and checkpoint ends ----------------------------------------------
    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Judge the last deferred batch before validation reads the kNN bank."""
        self.judge_pending(pl_module)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Judge the epoch's last batch, warn about its skips; stop when every batch of it
        was skipped."""
        if self._guarded:
            self.resolve(trainer, pl_module)  # before the epoch's metrics are computed
            if self._unlogged_skip:
                self._log_skips(pl_module)
        skipped, batches = self._skipped_epoch, self._batches_epoch
        epoch = trainer.current_epoch + 1  # as the console's epoch lines count
        self._skipped_epoch = self._batches_epoch = 0
        if not skipped:
            return
        if skipped >= batches:
            self._stop_skipping(
                pl_module, f"every batch of epoch {epoch} ({skipped} of {batches})"
            )
        rank_zero_warn(
            f"epoch {epoch}: skipped {skipped} batch(es) with "
            f"a non-finite loss, buffer or gradient ({self.skipped_total} in all; "
            "nonfinite_loss: skip)"
        )

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Judge the last batch; stop when this run skipped every batch it ran."""
        if not self._guarded:
            return
        self.resolve(trainer, pl_module)
        if self._batches_run and self._skipped_run >= self._batches_run:
            self._stop_skipping(
                pl_module,
                f"every batch of this run ({self._skipped_run} of {self._batches_run})",
            )

    def on_save_checkpoint(
        self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        """Judge a pending batch before its state is saved; a skipped one is taken out of
        the checkpoint (weights and optimiser state as they were before it); a stop raises
        here, so the checkpoint with the non-finite step is never written."""
        waiting = self._pending is not None or bool(self._queue)
        if waiting and self._guarded and self.resolve(trainer, pl_module):
            checkpoint["state_dict"] = trainer.strategy.lightning_module_state_dict()
            if "optimizer_states" in checkpoint:  # not in a weights-only save
                checkpoint["optimizer_states"] = [
                    trainer.strategy.optimizer_state(o) for o in trainer.optimizers
                ]
        checkpoint[CHECKPOINT_KEY] = self.skipped_total

    def on_load_checkpoint(
        self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        self.skipped_total = int(checkpoint.get(CHECKPOINT_KEY, 0))


__all__ = [
    "CHECKPOINT_KEY",
    "CONSECUTIVE_SKIP_LIMIT",
    "HINT",
    "GuardedModule",
    "NonFiniteGuard",
    "Verdict",
    "grad_code",
    "loss_code",
]
