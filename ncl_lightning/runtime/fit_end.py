"""How a fit ends: a validation of the final weights ([`FinalValidation`][]) and a short
summary of where the run is and what it reached ([`FitSummary`][]).

A config that validates every ``n`` epochs (``trainer.check_val_every_n_epoch: 5``) and
trains a number of epochs that is not a multiple of ``n`` never validates its final
weights: a 2-epoch try of such a config writes no validation row, no feature statistics
and (with ``ModelCheckpoint``'s defaults) no checkpoint. [`FinalValidation`][], a default
component of every fit ([`ncl_lightning.runtime.components`][]), makes the last epoch
(``max_epochs``) validate when it would not; epochs before it are untouched, so a run
whose last epoch validates anyway is unchanged.

[`FitSummary`][] (installed by ``ncl-cli``) logs, once on rank 0, when the fit ends::

    Fit done: epoch 2/2, step 22, 14s
      run folder: runs/digits_ncl/version_0
      checkpoint: runs/digits_ncl/version_0/checkpoints/last.ckpt
      last metrics: train/loss=4.78 val/online_acc=0.525 val/z/sparsity=0.91 ...
"""

from __future__ import annotations

import re
import time
from typing import Any

from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_info

from ncl_lightning.runtime.console import epoch_text, format_metrics
from ncl_lightning.runtime.progress import format_duration
from ncl_lightning.runtime.runs import run_folder

# The metrics of the summary (full matches), when logged: the losses, the probes'
# accuracies (a Classifier's ``val/<label>/acc_top1``) and the interpretability numbers of
# z (FeatureStatistics), BayesNCL's gate.
SUMMARY_KEYS = (
    r"train/loss",
    r"train/[^/]+/loss",
    r"val/online_acc",
    r"val/knn_acc",
    r"val/[^/]+/acc_top1",
    r"val/z/sparsity",
    r"val/z/active_dims",
    r"val/z/semantic_consistency",
    r"val/gate/open_rate",
)


def summary_metrics(logged: dict[str, Any]) -> dict[str, Any]:
    """The entries of ``logged`` that ``SUMMARY_KEYS`` name, in that order."""
    keys = [k for pattern in SUMMARY_KEYS for k in sorted(logged) if re.fullmatch(pattern, k)]
    return {key: logged[key] for key in dict.fromkeys(keys)}


def last_epoch(trainer: Any) -> bool:
    """Whether the epoch now running is the last one ``max_epochs`` allows."""
    epochs = trainer.max_epochs
    return epochs is not None and epochs > 0 and trainer.current_epoch + 1 >= epochs


class FinalValidation(Callback):
    """Validate at the end of the last epoch (``max_epochs``) when
    ``check_val_every_n_epoch`` would skip it.

    Changes ``trainer.check_val_every_n_epoch`` to 1 at the start of that epoch and puts
    the configured value back when training ends. Nothing changes when the last epoch
    validates anyway, when validation is off (``limit_val_batches: 0``, no validation
    data) or counted in batches (``check_val_every_n_epoch: null``), or when ``max_steps``
    ends the fit first.
    """

    def __init__(self) -> None:
        self.configured: int | None = None  # the value replaced, restored at the end

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        every = trainer.check_val_every_n_epoch
        if not isinstance(every, int) or every <= 1 or not last_epoch(trainer):
            return
        if (trainer.current_epoch + 1) % every != 0:
            self.configured = every
            trainer.check_val_every_n_epoch = 1

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        if self.configured is not None:
            trainer.check_val_every_n_epoch = self.configured
            self.configured = None


def summary_lines(trainer: Any, seconds: float | None) -> list[str]:
    """The lines of [`FitSummary`][] for a finished ``trainer``."""
    epoch = epoch_text(trainer, trainer.current_epoch)
    took = f", {format_duration(seconds)}" if seconds is not None else ""
    lines = [f"Fit done: {epoch}, step {trainer.global_step}{took}"]
    folder = run_folder(trainer)
    if folder:
        lines.append(f"  run folder: {folder}")
    checkpoint = trainer.checkpoint_callback
    path = checkpoint and (checkpoint.last_model_path or checkpoint.best_model_path)
    lines.append(f"  checkpoint: {path or 'none written'}")
    shown = format_metrics(summary_metrics(dict(trainer.callback_metrics)))
    if shown:
        lines.append(f"  last metrics: {shown}")
    return lines


class FitSummary(Callback):
    """Log a short summary when a fit ends (rank 0, Lightning's INFO logger): epoch and
    step, the run folder, the checkpoint written and the last logged values of the
    metrics ``SUMMARY_KEYS`` names."""

    def __init__(self) -> None:
        self._start: float | None = None

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        self._start = time.monotonic()

    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        seconds = None if self._start is None else time.monotonic() - self._start
        rank_zero_info("\n".join(summary_lines(trainer, seconds)))
