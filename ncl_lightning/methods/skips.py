"""What the non-finite guard does once a batch is found non-finite: skip it and count it
(``nonfinite_loss: skip``), or save the last finite state and stop (``stop``); and the
end of a run that skips every batch.

``skip`` is meant for a rare bad batch. A run in which every batch is non-finite (a
temperature or a learning rate that overflows, broken data) would otherwise skip them all
and end with exit status 0, having trained nothing; so the guard stops it, with the last
finite state saved and one line naming the last fault, when

* every batch of an epoch was skipped (checked at the end of the epoch),
* [`CONSECUTIVE_SKIP_LIMIT`][] batches in a row were skipped (a long epoch), or
* training ends without one batch trained in this run (``max_steps`` within an epoch).
"""

from __future__ import annotations

from pathlib import Path

import lightning as L
from lightning.pytorch.utilities import rank_zero_warn

from ncl_lightning.foundation.errors import NonFiniteLossError
from ncl_lightning.foundation.internals import attached_trainer, batch_index

LAST_FINITE_NAME = "last-finite.ckpt"
HINT = "set model.init_args.nonfinite_loss: skip to skip such batches"
CONSECUTIVE_SKIP_LIMIT = 100
"""Skipped batches in a row that stop a ``skip`` run: no rare bad batch any more."""


def where(trainer: L.Trainer | None) -> str:
    """``step S (epoch E, batch B)`` of the batch being trained."""
    if trainer is None:
        return "training_step"
    step, epoch = trainer.global_step, trainer.current_epoch
    return f"step {step} (epoch {epoch}, batch {batch_index(trainer)})"


def last_finite_path(trainer: L.Trainer) -> Path:
    """``<ModelCheckpoint dirpath>/last-finite.ckpt``, else under
    ``<default_root_dir>/checkpoints``."""
    callback = trainer.checkpoint_callback
    folder = getattr(callback, "dirpath", None) if callback is not None else None
    if not folder:
        folder = Path(trainer.default_root_dir) / "checkpoints"
    return Path(folder) / LAST_FINITE_NAME


class SkipOrStop:
    """The guard's accounting of skipped batches and its stop (a mixin of
    [`NonFiniteGuard`][ncl_lightning.methods.guard.NonFiniteGuard]).

    Attributes:
        skipped_total: Batches skipped over the run (saved in checkpoints, restored on
            resume).
    """

    def __init__(self) -> None:
        self.skipped_total = 0
        self._skipped_epoch = 0  # skipped batches in the current epoch
        self._batches_epoch = 0  # batches run in the current epoch
        self._batches_run = self._skipped_run = 0  # ... and in this run (this process)
        self._in_a_row = 0  # batches skipped since the last one known to be finite
        self._last_skip = ""  # what the last skipped batch had, and where
        self._skipped_since_step = 0  # micro-batches since the last optimiser step, skipped ...
        self._finite_since_step = 0  # ... and finite
        self._unlogged_skip = False

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

    def _skip_or_stop(
        self, module: L.LightningModule, what: str, at: str | None = None, log: bool = True
    ) -> bool:
        """Count a skip and return ``False`` (``nonfinite_loss: skip``), or save the last
        finite state and raise ``NonFiniteLossError("<what> at step ...")``."""
        trainer = attached_trainer(module)
        located = at is not None or trainer is not None
        fault = f"{what} at {at or where(trainer)}" if located else f"{what} in training_step"
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

    def _finite_batch(self) -> None:
        """A batch is known to be finite."""
        self._in_a_row = 0

    def _batch_ran(self) -> None:
        self._batches_epoch += 1
        self._batches_run += 1

    def _end_epoch(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        """Warn about this epoch's skips; stop when every batch of it was skipped (after
        its last verdict has been read)."""
        skipped, batches = self._skipped_epoch, self._batches_epoch
        self._skipped_epoch = self._batches_epoch = 0
        if not skipped:
            return
        if skipped >= batches:
            self._stop_skipping(
                module, f"every batch of epoch {trainer.current_epoch} ({skipped} of {batches})"
            )
        rank_zero_warn(
            f"epoch {trainer.current_epoch}: skipped {skipped} batch(es) with "
            f"a non-finite loss, buffer or gradient ({self.skipped_total} in all; "
            "nonfinite_loss: skip)"
        )

    def _end_training(self, module: L.LightningModule) -> None:
        """Stop when this run ran batches and skipped every one of them."""
        if self._batches_run and self._skipped_run >= self._batches_run:
            self._stop_skipping(
                module, f"every batch of this run ({self._skipped_run} of {self._batches_run})"
            )


__all__ = [
    "CONSECUTIVE_SKIP_LIMIT", "HINT", "LAST_FINITE_NAME", "SkipOrStop", "last_finite_path", "where",
]  # fmt: skip
