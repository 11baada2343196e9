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

A finite loss is also refused when its gradients are not finite or, with
``grad_norm_limit``, too large (under a ``GradScaler`` non-finite gradients are the
scaler's business). A parameter made non-finite by a step from finite gradients ends
training under both modes, without a checkpoint. Under DDP the ranks max-reduce the
verdict, so they all stop, or all skip, at the same step; a skipped batch still returns a
zero loss connected to every parameter (DDP needs the same backward on every rank), and
Lightning still counts its step.

Two ways to check, with the same guarantees (the site's reliability page, "Numerical
faults", details them): **deferred** ([`NonFiniteGuard.check_loss_later`][], the
self-supervised methods): the codes are computed and agreed on the device, the weights and
optimiser state copied before the step (``
StepSnapshot``), and the verdict read at the start of the next batch (or before
validation, a checkpoint, the end of an epoch or of training) by
[`NonFiniteGuard.resolve`][], which undoes a non-finite batch; no host synchronisation
in the step. **Immediate** ([`NonFiniteGuard.check_loss`][], the NCE classifier, whose
per-step metrics are logged in the step): one host synchronisation in the training step
and one before the optimiser step.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from torch import Tensor, nn

from ncl_lightning.foundation.components import FiniteCheckHost
from ncl_lightning.foundation.internals import attached_trainer
from ncl_lightning.foundation.options import NonFiniteLoss
from ncl_lightning.methods.finite_checks import (
    LOSS_SCALE,
    PARAMETER,
    checked_tensors,
    describe_gradients,
    describe_loss,
    grad_code,
    loss_code,
    module_tensors,
    nonfinite_parameter_error,
    scale_hint,
)
from ncl_lightning.methods.rollback import StepSnapshot, Verdict
from ncl_lightning.methods.skips import HINT, LAST_FINITE_NAME, SkipOrStop, last_finite_path
from ncl_lightning.methods.skips import where as _where

CHECKPOINT_KEY = "nonfinite_skipped"
MAX_PENDING = 2
"""Captured steps whose verdict may still be on its way to the host: the guard judges a
verdict once it is ready, and waits for the oldest only past this many."""


@runtime_checkable
class GuardedModule(Protocol):
    """What the guard reads and sets on a module (a [`TrainableModule`][] has it)."""

    nonfinite_loss: NonFiniteLoss
    grad_norm_limit: float | None
    last_step_skipped: bool
    captures_step: bool


def _scaled(trainer: L.Trainer) -> bool:
    """Whether a ``GradScaler`` handles non-finite gradients (``precision: 16-mixed``)."""
    return getattr(trainer.precision_plugin, "scaler", None) is not None


def _agree(trainer: L.Trainer | None, code: Tensor) -> int:
    """The largest ``code`` over the ranks, on the host: the guard's one collective and host
    synchronisation per check."""
    if trainer is not None and trainer.world_size > 1:
        code = trainer.strategy.reduce(code, reduce_op="max")
    return int(code.item())


class NonFiniteGuard(SkipOrStop, Callback):
    """Stop or skip on a non-finite loss, gradient, buffer or parameter (module docstring).

    The module's training step ends with::

        if not self.check_finite_later(loss):  # or loss_is_finite: checked at once
            return self.skipped_step_loss()
        self.after_finite_step(lambda: ...)  # what a skipped batch must not change
        return loss  # after logging

    which call [`check_loss_later`][] ([`check_loss`][]) and [`after_finite`][] of
    the guard the module was given: the guard attaches itself at ``setup``
    ([`FiniteCheckHost`][ncl_lightning.foundation.components.FiniteCheckHost]).
    Modules without ``nonfinite_loss``, ``grad_norm_limit`` and ``last_step_skipped``
    ([`GuardedModule`][]) are left alone.

    A ``skip`` run that skips every batch stops all the same
    (``SkipOrStop``).

    Attributes:
        skipped_total: Batches skipped over the run (saved in checkpoints, restored on
            resume).
    """

    def __init__(self) -> None:
        SkipOrStop.__init__(self)
        self._buffer_copy: list[Tensor] | None = None
        # The deferred check (check_loss_later): this batch's code and effects, and the
        # verdict of the last batch, read at the start of the next one.
        self._code: Tensor | None = None
        self._loss: Tensor | None = None
        self._effects: list[Callable[[], None]] = []
        self._pending: Verdict | None = None
        self._queue: deque[Verdict] = deque()  # captured steps' verdicts, oldest first
        self._snapshot = StepSnapshot()
        self._tensors: tuple[nn.Module, list[Tensor], list[Tensor]] | None = None
        self._skips_before_batch = 0

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        """Attach to the module: its training steps call this guard."""
        self._tensors = None
        if isinstance(pl_module, FiniteCheckHost):
            pl_module.attach_finite_check(self)

    def _listed(self, module: nn.Module) -> tuple[list[Tensor], list[Tensor]]:
        """``module``'s parameters and buffers, listed at its first training batch of the
        fit (a walk of the module tree costs thousands of Python calls: not every step)."""
        if self._tensors is None or self._tensors[0] is not module:
            self._tensors = (module, *module_tensors(module))
        return self._tensors[1], self._tensors[2]

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """List the module's tensors anew: the strategy has set the module up."""
        self._tensors = None

    # -- buffers ----------------------------------------------------------------------
    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        """Judge the previous batch (deferred check), then copy the buffers, to restore
        them if this batch is not finite."""
        if not isinstance(pl_module, GuardedModule):
            return
        if pl_module.captures_step:  # buffers are put back in the step's own graph
            self.resolve(trainer, pl_module, wait=False)
            self._skips_before_batch = self.skipped_total
            return
        self.resolve(trainer, pl_module)
        self._skips_before_batch = self.skipped_total
        buffers = self._listed(pl_module)[1]  # no autograd history: copied as they are
        copy = self._buffer_copy
        if copy is not None and [(c.device, c.dtype, c.shape) for c in copy] == [
            (b.device, b.dtype, b.shape) for b in buffers
        ]:
            if buffers:
                torch._foreach_copy_(copy, buffers)
        else:  # first batch, or the module moved or changed since
            self._buffer_copy = [b.clone() for b in buffers]

    @torch.no_grad()
    def _restore_buffers(self, module: nn.Module) -> None:
        buffers, copy = self._listed(module)[1], self._buffer_copy
        if copy is not None and buffers and len(copy) == len(buffers):
            torch._foreach_copy_(buffers, copy)

    # -- the training step's check ----------------------------------------------------
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
        code = loss_code(module, value)
        trainer = attached_trainer(module)
        flag = _agree(trainer, code)
        if flag == 0:
            self._finite_since_step += 1
            return True
        params, buffers = checked_tensors(module)
        if flag == PARAMETER:
            raise nonfinite_parameter_error(params, _where(trainer))
        what = describe_loss(flag, value, buffers, scale_hint(module))
        self._restore_buffers(module)
        return self._skip_or_stop(module, what)

    # -- the deferred check -------------------------------------------------------------
    def check_loss_later(self, module: L.LightningModule, loss: Tensor) -> bool:
        """[`check_loss`][] without waiting: the codes are computed on the device and the
        verdict read at the start of the next batch ([`resolve`][]), which stops or
        skips as [`check_loss`][] would, after putting back the weights, optimiser state
        and buffers from before this batch. Returns ``True``; without a trainer (a step
        called by hand, nothing to undo later) it is [`check_loss`][]."""
        if attached_trainer(module) is None:
            return self.check_loss(module, loss)
        value = loss.detach()
        code = LOSS_SCALE * loss_code(module, value, self._listed(module))
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
        verdict = Verdict(_where(module.trainer), False, [effect] if effect else [], None)
        verdict.publish(code)
        self._queue.append(verdict)

    def _publish(self, trainer: L.Trainer, code: Tensor, stepped: bool) -> None:
        """Agree on ``code`` over the ranks (on the device) and send it to the host."""
        if trainer.world_size > 1:
            code = trainer.strategy.reduce(code, reduce_op="max")
        verdict = Verdict(_where(trainer), stepped, self._effects, self._loss)
        verdict.publish(code)
        self._pending, self._code, self._loss, self._effects = verdict, None, None, []

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
            self._finite_batch()
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
        params, buffers = checked_tensors(module)
        if flag >= LOSS_SCALE and flag / LOSS_SCALE == PARAMETER:
            raise nonfinite_parameter_error(params, verdict.where)
        if flag >= LOSS_SCALE:
            what = describe_loss(flag / LOSS_SCALE, verdict.loss, buffers, scale_hint(module))
        else:
            what = describe_gradients(flag, module)
        if not captured:
            self._restore_buffers(module)
        self._unlogged_skip = module.nonfinite_loss == "skip"  # type: ignore[attr-defined]
        self._skip_or_stop(module, what, verdict.where, log=False)
        return True

    # -- gradients --------------------------------------------------------------------
    def _gradients_are_fine(self, trainer: L.Trainer, module: L.LightningModule) -> bool:
        """``True`` when the gradient norm is finite (unless a ``GradScaler`` handles that)
        and within ``grad_norm_limit`` on every rank; otherwise stop or skip.

        One host synchronisation (and one small all-reduce under DDP).
        """
        code = grad_code(module, _scaled(trainer))
        if code is None:
            return True
        flag = _agree(trainer, code)
        if flag == 0:
            return True
        self._restore_buffers(module)
        return self._skip_or_stop(module, describe_gradients(flag, module))

    def on_before_optimizer_step(
        self, trainer: L.Trainer, pl_module: L.LightningModule, optimizer: torch.optim.Optimizer
    ) -> None:
        """Check the gradients; drop them when every batch since the last step was skipped
        (or the gradients are skipped now), so the optimiser moves nothing: no momentum,
        weight decay or moment update. Sets the module's ``last_step_skipped``.

        After a deferred check ([`check_loss_later`][]) nothing is decided here: the
        gradient code joins the batch's code, the weights and optimiser state are copied
        (``StepSnapshot``) and the verdict goes to the
        host, to be read at the start of the next batch."""
        if not isinstance(pl_module, GuardedModule) or pl_module.captures_step:
            return  # a captured step judges its gradients in its own graph
        if self._code is not None:
            params = self._listed(pl_module)[0]
            code = grad_code(pl_module, _scaled(trainer), params)
            if code is not None:
                self._code = torch.maximum(self._code, code)
            self._snapshot.take(pl_module, optimizer, params)
            self._publish(trainer, self._code, stepped=True)
            pl_module.last_step_skipped = False
            return
        skipped = self._skipped_since_step > 0 and self._finite_since_step == 0
        if not skipped and not self._gradients_are_fine(trainer, pl_module):
            skipped = True
        pl_module.last_step_skipped = skipped
        if skipped:
            for group in optimizer.param_groups:
                for p in group["params"]:
                    p.grad = None
        self._skipped_since_step = self._finite_since_step = 0

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any
    ) -> None:
        """Send the verdict of a deferred micro-batch that did not step the optimiser
        (gradient accumulation), and log a skip found at the start of this batch."""
        if self._code is not None:
            self._publish(trainer, self._code, stepped=False)
        deferred = self._pending is not None or bool(self._queue)  # judged later
        if isinstance(pl_module, GuardedModule):
            self._batch_ran()
            if not deferred and self.skipped_total == self._skips_before_batch:
                self._finite_batch()
        if self._unlogged_skip:
            self._log_skips(pl_module)

    def judge_pending(self, module: L.LightningModule) -> None:
        """Read the deferred verdict now: called by the module before Lightning sets its
        gradients to ``None`` for validation, so a non-finite gradient can be named."""
        if isinstance(module, GuardedModule):
            self.resolve(module.trainer, module)

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Judge the last deferred batch before validation reads the kNN bank."""
        self.judge_pending(pl_module)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if isinstance(pl_module, GuardedModule):
            self.resolve(trainer, pl_module)  # before the epoch's metrics are computed
            if self._unlogged_skip:
                self._log_skips(pl_module)
        self._end_epoch(trainer, pl_module)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if isinstance(pl_module, GuardedModule):
            self.resolve(trainer, pl_module)
            self._end_training(pl_module)

    def on_save_checkpoint(
        self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        """Judge a pending batch before its state is saved; a skipped one is taken out of
        the checkpoint (weights and optimiser state as they were before it); a stop raises
        here, so the checkpoint with the non-finite step is never written."""
        waiting = self._pending is not None or bool(self._queue)
        pending = waiting and isinstance(pl_module, GuardedModule)
        if pending and self.resolve(trainer, pl_module):  # stop: last-finite.ckpt, raises
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
    "HINT",
    "LAST_FINITE_NAME",
    "GuardedModule",
    "NonFiniteGuard",
    "last_finite_path",
]
