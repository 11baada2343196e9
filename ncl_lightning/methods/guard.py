"""What a training step does with a NaN or infinite loss or gradient: stop with a
checkpoint, or skip.

Every trainable module of the package (:class:`~ncl_lightning.methods.SSLMethod`,
:class:`~ncl_lightning.methods.Classifier`) takes ``nonfinite_loss``:

* ``stop`` (default): the weights are still the last finite state (no backward has run
  for this loss), so they are saved to ``last-finite.ckpt`` beside the run's checkpoints
  and training stops with :class:`~ncl_lightning.runtime.errors.NonFiniteLossError`, one line
  naming the step, the epoch, the batch and the file.
* ``skip``: the batch changes nothing, neither the weights nor the optimiser state (no
  momentum, weight decay or Adam moment update), the online probe's metrics nor the kNN
  bank; ``train/skipped_nonfinite`` counts the skipped batches and one warning per epoch
  gives the count.

In both modes the buffers (BatchNorm running statistics) are put back as they were before
the batch: its forward pass already updated them, possibly with NaN. A copy of the buffers
is taken at the start of every training batch for this (one fused copy; buffers are small).

The same handling applies, before the optimiser step, to a *finite* loss whose gradients
are not finite (one gradient norm over every parameter: NaN, or Inf including an overflow of
the norm itself) or, when ``grad_norm_limit`` is set, larger than that limit; and to
BatchNorm running statistics (any floating buffer) that the batch's forward pass made
non-finite. "Exploding" is the user's threshold, off by default (``grad_norm_limit: None``):
no fixed number can tell a blow-up from a healthy large gradient on every model, and a
false stop is worse than none, so by default only non-finite values count. Under a
``GradScaler`` (``precision: 16-mixed``) non-finite gradients are the scaler's business (it
skips the step and lowers the scale); only ``grad_norm_limit`` applies. A parameter that is
already non-finite when a batch starts (an optimiser step made it so from finite
gradients) ends training under both modes, without a checkpoint: no finite state is left.

Cost: one host synchronisation in the training step (loss, buffers and parameters together)
and one before the optimiser step (the gradient norm); each is a single max-reduce under
DDP. The second cannot be folded into the first: the gradients exist only after the
backward pass, and the first must decide before the training step logs the batch or adds
it to the kNN bank.

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

from ncl_lightning.runtime.errors import NonFiniteLossError
from ncl_lightning.runtime.internals import batch_index
from ncl_lightning.runtime.validation import check_positive

NonFiniteLoss = Literal["stop", "skip"]
NONFINITE_CHOICES: tuple[str, ...] = ("stop", "skip")
LAST_FINITE_NAME = "last-finite.ckpt"
_CHECKPOINT_KEY = "nonfinite_skipped"
HINT = "set model.init_args.nonfinite_loss: skip to skip such batches"
# Codes of the training-step check (max-reduced over ranks: the highest wins; a NaN loss
# often comes with NaN running statistics, and the loss is what the user sees).
_BUFFER, _LOSS_INF, _LOSS_NAN, _PARAMETER = 1.0, 2.0, 3.0, 4.0
# Codes of the gradient check.
_GRAD_ABOVE_LIMIT, _GRAD_NONFINITE = 1.0, 2.0


def check_grad_norm_limit(value: float | None) -> None:
    """``ConfigError`` unless ``value`` is ``None`` or a finite number ``> 0``."""
    if value is not None:
        check_positive("grad_norm_limit", value)


def _max_abs(tensors: list[Tensor]) -> Tensor:
    """``max |x|`` over every element of ``tensors`` (NaN if any is NaN), on their device."""
    return torch.stack(torch._foreach_norm(tensors, float("inf"))).max()


def _first_nonfinite(named: list[tuple[str, Tensor]]) -> tuple[str, str] | None:
    """``(name, "nan" | "inf")`` of the first tensor with a non-finite element, else None."""
    for name, t in named:
        if not torch.isfinite(t).all():
            return name, "nan" if t.isnan().any() else "inf"
    return None


class NonFiniteGuard:
    """LightningModule mixin: :meth:`loss_is_finite` and :meth:`skipped_step_loss` for the
    training step, and the hooks that check the gradients and make a skipped batch a no-op.

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

    def _checked_tensors(self) -> tuple[list[tuple[str, Tensor]], list[tuple[str, Tensor]]]:
        """Floating, non-empty ``(parameters, buffers)`` by name: what must stay finite."""
        module: torch.nn.Module = self  # type: ignore[assignment]

        def keep(named: Any) -> list[tuple[str, Tensor]]:
            return [(n, t.detach()) for n, t in named if t.is_floating_point() and t.numel()]

        return keep(module.named_parameters()), keep(module.named_buffers())

    @torch.no_grad()
    def _restore_buffers(self) -> None:
        buffers, copy = self._guarded_buffers(), self._nonfinite_buffer_copy
        if copy is not None and buffers and len(copy) == len(buffers):
            torch._foreach_copy_(buffers, copy)

    def _agree(self, code: Tensor) -> int:
        """The largest ``code`` over the ranks, on the host: the guard's one collective and
        host synchronisation per check."""
        trainer = getattr(self, "_trainer", None)
        if trainer is not None and trainer.world_size > 1:
            code = trainer.strategy.reduce(code, reduce_op="max")
        return int(code.item())

    def _where(self) -> str:
        trainer = self._trainer  # type: ignore[attr-defined]
        return (
            f"step {trainer.global_step} (epoch {trainer.current_epoch}, "
            f"batch {batch_index(trainer)})"
        )

    def loss_is_finite(self, loss: Tensor) -> bool:
        """``True`` when ``loss``, the buffers and the parameters are finite on every rank;
        otherwise stop or skip (non-finite parameters always stop).

        One host synchronisation per step (and one small all-reduce under DDP).

        Raises:
            NonFiniteLossError: Under ``nonfinite_loss: stop``, after saving the last finite
                state (every rank takes part in the save); under both modes for a parameter
                that an earlier optimiser step made non-finite.
        """
        value = loss.detach()
        code = torch.where(
            value.isnan().any(), _LOSS_NAN, torch.where(value.isinf().any(), _LOSS_INF, 0.0)
        ).float()
        params, buffers = self._checked_tensors()
        for named, bad in ((params, _PARAMETER), (buffers, _BUFFER)):
            if named:
                finite = _max_abs([t for _, t in named]).isfinite()
                code = torch.maximum(code, torch.where(finite, 0.0, bad).to(code))
        flag = self._agree(code)
        if flag == 0:
            self._finite_since_step += 1
            return True
        if flag == _PARAMETER:
            self._raise_nonfinite_parameter(params)
        self._restore_buffers()
        if flag == _BUFFER:
            culprit = _first_nonfinite(buffers)
            what = f"buffer {culprit[0]} ({culprit[1]})" if culprit else "buffer on another rank"
        elif value.numel() == 1 and not value.isfinite().all():
            what = f"loss ({value.float().item()})"  # "nan", "inf" or "-inf" of this rank
        else:  # this rank's loss is fine; another's is not
            what = f"loss ({'nan' if flag == _LOSS_NAN else 'inf'})"
        if self.hparams.get("nonfinite_loss", "stop") == "skip":
            self._count_skip()
            return False
        self._stop(f"non-finite {what}")
        return False  # unreachable: _stop raises

    def _raise_nonfinite_parameter(self, named: list[tuple[str, Tensor]]) -> None:
        culprit = _first_nonfinite(named)
        what = f"parameter {culprit[0]} ({culprit[1]})" if culprit else "parameter on another rank"
        where = self._where() if getattr(self, "_trainer", None) is not None else "training_step"
        raise NonFiniteLossError(
            f"non-finite {what} at {where}, from an optimiser step with finite gradients; "
            "training stopped; no finite state left to save: resume from an earlier "
            "checkpoint with a lower learning rate or set model.init_args.grad_norm_limit"
        )

    def skipped_step_loss(self) -> Tensor:
        """A zero loss connected to every trainable parameter (zero gradients everywhere,
        the same backward and gradient all-reduce on every rank)."""
        module: torch.nn.Module = self  # type: ignore[assignment]
        params = [p for p in module.parameters() if p.requires_grad]
        if not params:
            return torch.zeros((), device=getattr(self, "device", None))
        return sum(p.sum() for p in params) * 0.0  # type: ignore[return-value]

    # -- gradients --------------------------------------------------------------------
    def _gradients_are_fine(self) -> bool:
        """``True`` when the gradient norm is finite (unless a ``GradScaler`` handles that)
        and within ``grad_norm_limit`` on every rank; otherwise stop or skip.

        One host synchronisation (and one small all-reduce under DDP).
        """
        module: torch.nn.Module = self  # type: ignore[assignment]
        named = [(n, p.grad) for n, p in module.named_parameters() if p.grad is not None]
        if not named:
            return True
        norms = torch.stack(torch._foreach_norm([g for _, g in named])).float()
        total = torch.linalg.vector_norm(norms)
        limit = self.hparams.get("grad_norm_limit")
        trainer = getattr(self, "_trainer", None)
        scaled = getattr(getattr(trainer, "precision_plugin", None), "scaler", None) is not None
        finite = total.isfinite()
        code = torch.where(finite | scaled, 0.0, _GRAD_NONFINITE)
        if limit is not None:
            code = torch.maximum(
                code, torch.where(finite & (total > limit), _GRAD_ABOVE_LIMIT, 0.0)
            )
        flag = self._agree(code)
        if flag == 0:
            return True
        self._restore_buffers()
        culprit = _first_nonfinite(named)
        if culprit is not None:
            what = f"non-finite gradient of {culprit[0]} ({culprit[1]})"
        else:
            largest = int(norms.nan_to_num(posinf=0.0).argmax())
            name = f"largest: {named[largest][0]} {float(norms[largest]):.3g}"
            if flag == _GRAD_NONFINITE:
                what = f"non-finite gradient norm (overflow; {name})"
            else:
                what = f"gradient norm {float(total):.3g} above grad_norm_limit {limit} ({name})"
        if self.hparams.get("nonfinite_loss", "stop") == "skip":
            self._count_skip()
            return False
        self._stop(what)
        return False  # unreachable: _stop raises

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

    def _stop(self, what: str) -> None:
        """Save the last finite state and raise ``NonFiniteLossError("<what> at step ...")``."""
        trainer = getattr(self, "_trainer", None)
        if trainer is None:
            raise NonFiniteLossError(f"{what} in training_step; {HINT}")
        path = self.last_finite_path()
        trainer.save_checkpoint(path)  # collective: every rank calls it, rank 0 writes
        raise NonFiniteLossError(
            f"{what} at {self._where()}; training stopped; last finite state "
            f"saved to {path}; {HINT}"
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
        """Check the gradients; drop them when every batch since the last step was skipped
        (or the gradients are skipped now), so the optimiser moves nothing: no momentum,
        weight decay or moment update."""
        self.last_step_skipped = self._skipped_since_step > 0 and self._finite_since_step == 0
        if not self.last_step_skipped and not self._gradients_are_fine():
            self.last_step_skipped = True
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
                f"loss, buffer or gradient ({self._nonfinite_total} in all; "
                "nonfinite_loss: skip)"
            )
        self._nonfinite_epoch = 0

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_save_checkpoint(checkpoint)  # type: ignore[misc]
        checkpoint[_CHECKPOINT_KEY] = self._nonfinite_total

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_load_checkpoint(checkpoint)  # type: ignore[misc]
        self._nonfinite_total = int(checkpoint.get(_CHECKPOINT_KEY, 0))
