"""What a training step does with a NaN or infinite loss: stop with a checkpoint, or skip.

Every trainable module of the package (:class:`~ncl_lightning.methods.SSLMethod`,
:class:`~ncl_lightning.methods.Classifier`) takes ``nonfinite_loss``:

* ``stop`` (default): the weights are still the last finite state (no backward has run
  for this loss), so they are saved to ``last-finite.ckpt`` beside the run's checkpoints
  and training stops with :class:`~ncl_lightning.errors.NonFiniteLossError`, one line
  naming the step, the epoch, the batch and the file.
* ``skip``: the batch changes nothing, neither the weights nor the optimiser state (no
  momentum, weight decay or Adam moment update), the online probe's metrics nor the kNN
  bank; ``train/skipped_nonfinite`` counts the skipped batches and one warning per epoch
  gives the count.

In both modes the buffers (BatchNorm running statistics) are put back as they were before
the batch: its forward pass already updated them, possibly with NaN. A copy of the buffers
is taken at the start of every training batch for this (one fused copy; buffers are small).

Under DDP the ranks agree first (the "non-finite" flag is max-reduced over the ranks), so
they all stop, or all skip, at the same step and none waits on a collective the others
left. A skipped batch still returns a loss (zero, connected to every trainable parameter)
because Lightning refuses ``None`` from ``training_step`` under DDP and DDP's gradient
all-reduce needs the same backward on every rank; the zero gradients are then dropped in
``on_before_optimizer_step`` so the optimiser step is a no-op. Lightning still counts that
step: ``global_step`` and a step-interval LR schedule advance as for any batch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import torch
from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor

from ncl_lightning.errors import NonFiniteLossError

NonFiniteLoss = Literal["stop", "skip"]
NONFINITE_CHOICES: tuple[str, ...] = ("stop", "skip")
LAST_FINITE_NAME = "last-finite.ckpt"
_CHECKPOINT_KEY = "nonfinite_skipped"


class NonFiniteGuard:
    """LightningModule mixin: :meth:`loss_is_finite` and :meth:`skipped_step_loss` for the
    training step, and the hooks that make a skipped batch a no-op.

    A training step ends with::

        if not self.loss_is_finite(loss):  # raises under nonfinite_loss: stop
            return self.skipped_step_loss()
        ...  # metric updates and logging of a finite step
        return loss
    """

    hparams: Any
    _nonfinite_total = 0  # skipped batches over the run (restored from checkpoints)
    _nonfinite_epoch = 0  # skipped batches in the current epoch
    _skipped_since_step = 0  # micro-batches since the last optimiser step, skipped ...
    _finite_since_step = 0  # ... and finite
    last_step_skipped = False
    """Whether the last optimiser step was a no-op (all its batches skipped)."""
    _nonfinite_buffer_copy: list[Tensor] | None = None

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        """Copy the buffers, to restore them if this batch's loss is not finite."""
        buffers = self._guarded_buffers()
        copy = self._nonfinite_buffer_copy
        if copy is not None and [(c.device, c.dtype, c.shape) for c in copy] == [
            (b.device, b.dtype, b.shape) for b in buffers
        ]:
            if buffers:
                torch._foreach_copy_(copy, buffers)
        else:  # first batch, or the module moved or changed since
            self._nonfinite_buffer_copy = [b.clone() for b in buffers]

    def _guarded_buffers(self) -> list[Tensor]:
        module: torch.nn.Module = self  # type: ignore[assignment]
        return [b.detach() for b in module.buffers()]

    @torch.no_grad()
    def _restore_buffers(self) -> None:
        buffers, copy = self._guarded_buffers(), self._nonfinite_buffer_copy
        if copy is not None and buffers and len(copy) == len(buffers):
            torch._foreach_copy_(buffers, copy)

    def loss_is_finite(self, loss: Tensor) -> bool:
        """``True`` when ``loss`` is finite on every rank; otherwise stop or skip.

        One host synchronisation per step (and one small all-reduce under DDP).

        Raises:
            NonFiniteLossError: Under ``nonfinite_loss: stop``, after saving the last finite
                state (every rank takes part in the save).
        """
        value = loss.detach()
        code = torch.where(
            value.isnan().any(), 2.0, torch.where(value.isinf().any(), 1.0, 0.0)
        ).float()
        trainer = getattr(self, "_trainer", None)
        if trainer is not None and trainer.world_size > 1:
            code = trainer.strategy.reduce(code, reduce_op="max")
        flag = int(code.item())
        if flag == 0:
            self._finite_since_step += 1
            return True
        self._restore_buffers()
        if value.numel() == 1 and not value.isfinite().all():
            kind = str(value.float().item())  # "nan", "inf" or "-inf" of this rank
        else:
            kind = "nan" if flag == 2 else "inf"  # this rank's loss is fine; another's is not
        if self.hparams.get("nonfinite_loss", "stop") == "skip":
            self._count_skip()
            return False
        self._stop(kind)
        return False  # unreachable: _stop raises

    def skipped_step_loss(self) -> Tensor:
        """A zero loss connected to every trainable parameter (zero gradients everywhere,
        the same backward and gradient all-reduce on every rank)."""
        module: torch.nn.Module = self  # type: ignore[assignment]
        params = [p for p in module.parameters() if p.requires_grad]
        if not params:
            return torch.zeros((), device=getattr(self, "device", None))
        return sum(p.sum() for p in params) * 0.0  # type: ignore[return-value]

    # -- stop -------------------------------------------------------------------------
    def last_finite_path(self) -> Path:
        """``<ModelCheckpoint dirpath>/last-finite.ckpt``, else under
        ``<default_root_dir>/checkpoints``."""
        trainer = self._trainer  # type: ignore[attr-defined]
        callback = trainer.checkpoint_callback
        folder = getattr(callback, "dirpath", None) if callback is not None else None
        if not folder:
            folder = Path(trainer.default_root_dir) / "checkpoints"
        return Path(folder) / LAST_FINITE_NAME

    def _stop(self, kind: str) -> None:
        trainer = getattr(self, "_trainer", None)
        hint = "set model.init_args.nonfinite_loss: skip to skip such batches"
        if trainer is None:
            raise NonFiniteLossError(f"non-finite loss ({kind}) in training_step; {hint}")
        path = self.last_finite_path()
        trainer.save_checkpoint(path)  # collective: every rank calls it, rank 0 writes
        where = (
            f"step {trainer.global_step} (epoch {trainer.current_epoch}, "
            f"batch {trainer.fit_loop.epoch_loop.batch_idx})"
        )
        raise NonFiniteLossError(
            f"non-finite loss ({kind}) at {where}; training stopped; last finite state "
            f"saved to {path}; {hint}"
        )

    # -- skip -------------------------------------------------------------------------
    def _count_skip(self) -> None:
        self._skipped_since_step += 1
        self._nonfinite_total += 1
        self._nonfinite_epoch += 1
        self.log(  # type: ignore[attr-defined]
            "train/skipped_nonfinite",
            float(self._nonfinite_total),
            on_step=False,
            on_epoch=True,
            reduce_fx="max",
            sync_dist=True,
        )

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        """Drop the (zero) gradients when every batch since the last step was skipped, so
        the optimiser moves nothing: no momentum, weight decay or moment update."""
        self.last_step_skipped = self._skipped_since_step > 0 and self._finite_since_step == 0
        if self.last_step_skipped:
            for group in optimizer.param_groups:
                for p in group["params"]:
                    p.grad = None
        self._skipped_since_step = self._finite_since_step = 0

    def on_train_epoch_end(self) -> None:
        if self._nonfinite_epoch:
            epoch = self.trainer.current_epoch  # type: ignore[attr-defined]
            rank_zero_warn(
                f"epoch {epoch}: skipped {self._nonfinite_epoch} batch(es) with a non-finite "
                f"loss ({self._nonfinite_total} in all; nonfinite_loss: skip)"
            )
        self._nonfinite_epoch = 0

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_save_checkpoint(checkpoint)  # type: ignore[misc]
        checkpoint[_CHECKPOINT_KEY] = self._nonfinite_total

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_load_checkpoint(checkpoint)  # type: ignore[misc]
        self._nonfinite_total = int(checkpoint.get(_CHECKPOINT_KEY, 0))
