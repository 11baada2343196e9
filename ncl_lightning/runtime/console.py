"""What ``ncl-cli`` adds to Lightning's console output: [`LineProgress`][] in a log file,
[`ModelTable`][] when a fit starts, [`FitSummary`][] when it ends, and
[`default_logger`][] without Lightning's note."""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from collections.abc import Sequence
from time import monotonic
from typing import Any

from jsonargparse import Namespace
from lightning.pytorch.callbacks import Callback, ModelSummary, ProgressBar
from lightning.pytorch.utilities import rank_zero_info
from lightning.pytorch.utilities.model_summary import (
    get_formatted_model_size,
    get_human_readable_count,
)
from torch import nn

from ncl_lightning.foundation.progress import format_duration
from ncl_lightning.methods.record import run_folder

# The metrics of the summary (full matches), when logged: the losses, the probes'
# accuracies and the interpretability numbers of z (FeatureStatistics), BayesNCL's gate.
SUMMARY_KEYS = (
    r"train/loss", r"train/[^/]+/loss", r"val/online_acc", r"val/knn_acc",
    r"val/[^/]+/acc_top1", r"val/z/sparsity", r"val/z/active_dims",
    r"val/z/semantic_consistency", r"val/gate/open_rate",
)  # fmt: skip


def epoch_text(trainer: Any, n: int) -> str:
    """``"epoch n/max"`` (``"epoch n"`` without a ``max_epochs``)."""
    epochs = trainer.max_epochs if trainer.max_epochs not in (None, -1) else None
    return f"epoch {n}" + (f"/{epochs}" if epochs else "")


def format_metrics(metrics: dict[str, Any]) -> str:
    """``key=value`` pairs of the numeric ``metrics`` (4 significant digits), in order."""
    cells = []
    for key, value in metrics.items():
        number = value.item() if hasattr(value, "item") else value
        if isinstance(number, int | float) and not isinstance(number, bool):
            cells.append(f"{key}={number:.4g}")
    return " ".join(cells)


class LineProgress(ProgressBar):
    """Lightning progress for a log file: one line per training epoch on ``stderr``
    (rank 0), flushed at once::

        Epoch 3/30: 11 batches in 1.2s | objective=5.3 val/online_acc=0.525

    Validation values (``val/...``) are shown on the lines of the epochs that validated,
    not carried over to those that did not; an epoch that ran no batch (a resume from
    the end of an epoch) writes no line.

    Args:
        interval_s: Inside an epoch, also a line (``batch k/N``, batches per second)
            when this many seconds passed since the last one.
    """

    def __init__(self, interval_s: float = 120.0) -> None:
        super().__init__()
        self.interval_s = interval_s
        self.enabled = True
        self._epoch_start = self._last_line = monotonic()
        self._batches = 0
        self._validated = False  # whether this training epoch ran its validation

    def disable(self) -> None:
        self.enabled = False

    def enable(self) -> None:
        self.enabled = True

    def _write(self, trainer: Any, pl_module: Any, head: str) -> None:
        if not self.enabled:
            return
        metrics = {
            k: v
            for k, v in self.get_metrics(trainer, pl_module).items()
            if k != "v_num" and (self._validated or not k.startswith("val/"))
        }
        shown = format_metrics(metrics)
        epoch = epoch_text(trainer, trainer.current_epoch + 1).capitalize()
        line = f"{epoch}: {head}" + (f" | {shown}" if shown else "")
        print(line, file=sys.stderr, flush=True)

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self._epoch_start = self._last_line = monotonic()
        self._batches = 0
        self._validated = False

    def on_validation_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        if not trainer.sanity_checking:
            self._validated = True

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self._batches += 1
        now = monotonic()
        if now - self._last_line >= self.interval_s:
            self._last_line = now
            total = self.total_train_batches
            of = f"/{total}" if isinstance(total, int) else ""
            rate = self._batches / max(now - self._epoch_start, 1e-9)
            self._write(trainer, pl_module, f"batch {batch_idx + 1}{of}, {rate:.3g} it/s")

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        if self._batches == 0:
            return
        took = format_duration(monotonic() - self._epoch_start)
        self._write(trainer, pl_module, f"{self._batches} batches in {took}")


def progress_callbacks(trainer_config: dict[str, Any]) -> list[Callback]:
    """``[LineProgress()]`` when Lightning would draw its per-batch bar into a standard
    error that is not a terminal, else ``[]``; ``trainer_config``: the instantiated
    ``trainer`` section."""
    listed = trainer_config.get("callbacks") or []
    listed = listed if isinstance(listed, Sequence) else [listed]
    if (
        trainer_config.get("enable_progress_bar") is False
        or sys.stderr.isatty()
        or any(isinstance(c, ProgressBar) for c in listed)  # the user's own bar
    ):
        return []
    return [LineProgress()]


def model_table(module: nn.Module) -> str:
    """The table of Lightning's model summary: each top-level module's name, type,
    parameters and mode, then the totals; the size is that of the parameters as stored
    (float32 under ``bf16-mixed``, bfloat16 under ``bf16-true``)."""
    rows = [("", "Name", "Type", "Params", "Mode")]
    for i, (name, child) in enumerate(module.named_children()):
        count = sum(p.numel() for p in child.parameters())
        mode = "train" if child.training else "eval"
        rows.append((str(i), name, type(child).__name__, get_human_readable_count(count), mode))
    widths = [max(len(row[c]) for row in rows) for c in range(len(rows[0]))]
    lines = [" | ".join(map(str.ljust, row, widths)).rstrip() for row in rows]
    rule = "-" * max(len(line) for line in lines)
    params = [p for p in module.parameters() if not nn.parameter.is_lazy(p)]
    total = sum(p.numel() for p in params)
    trainable = sum(p.numel() for p in params if p.requires_grad)
    megabytes = sum(p.numel() * p.element_size() for p in params) / 1e6
    modes = [m.training for m in module.modules()][1:]  # without the module itself
    totals = [
        (get_human_readable_count(trainable), "Trainable params"),
        (get_human_readable_count(total - trainable), "Non-trainable params"),
        (get_human_readable_count(total), "Total params"),
        (get_formatted_model_size(megabytes), "Total params size (MB)"),
        (str(modes.count(True)), "Modules in train mode"),
        (str(modes.count(False)), "Modules in eval mode"),
    ]
    return "\n".join([lines[0], rule, *lines[1:], rule, *(f"{v:<10}{k}" for v, k in totals)])


class ModelTable(Callback):
    """Lightning's model summary when a fit starts (rank 0), without its two notes that no
    setting changes: a FLOPs column, filled only from an ``example_input_array`` (zeros
    otherwise), and a warning that it cannot size the parameters of a mixed precision
    (they are float32 then). [`model_table`][] makes the table."""

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        if trainer.is_global_zero:
            rank_zero_info("\n" + model_table(pl_module))


def summary_callbacks(trainer_config: dict[str, Any]) -> list[Callback]:
    """``[ModelTable()]`` unless ``enable_model_summary`` or ``barebones`` turn the summary
    off or a ``ModelSummary`` callback is listed; ``trainer_config``: the instantiated
    ``trainer`` section. The trainer itself then adds none (``enable_model_summary=False``)."""
    listed = trainer_config.get("callbacks") or []
    listed = listed if isinstance(listed, Sequence) else [listed]
    if (
        trainer_config.get("enable_model_summary") is False
        or trainer_config.get("barebones")
        or any(isinstance(c, ModelSummary) for c in listed)  # the user's own summary
    ):
        return []
    return [ModelTable()]


def default_logger(trainer_config: Any) -> None:
    """Without TensorBoard, configure Lightning's default ``CSVLogger`` into the parsed
    ``trainer_config`` (in place) where ``trainer.logger`` is unset or ``true``, so that
    Lightning has no ``tensorboardX`` note to print."""
    if trainer_config.get("logger") not in (None, True) or any(
        importlib.util.find_spec(name) for name in ("tensorboard", "tensorboardX")
    ):
        return
    root = str(trainer_config.get("default_root_dir") or os.getcwd())
    trainer_config["logger"] = Namespace(
        class_path="lightning.pytorch.loggers.CSVLogger", init_args=Namespace(save_dir=root)
    )


def summary_metrics(logged: dict[str, Any]) -> dict[str, Any]:
    """The entries of ``logged`` that ``SUMMARY_KEYS`` name, in that order."""
    keys = [k for pattern in SUMMARY_KEYS for k in sorted(logged) if re.fullmatch(pattern, k)]
    return {key: logged[key] for key in dict.fromkeys(keys)}


class FitSummary(Callback):
    """Log a short summary when a fit ends (rank 0, Lightning's INFO logger): epoch and
    step, the run folder, the checkpoint written and the last logged values of the
    metrics ``SUMMARY_KEYS`` names."""

    _start: float | None = None  # set when the fit starts

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        self._start = monotonic()

    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        took = "" if self._start is None else f", {format_duration(monotonic() - self._start)}"
        epoch = epoch_text(trainer, trainer.current_epoch)
        lines = [f"Fit done: {epoch}, step {trainer.global_step}{took}"]
        if folder := run_folder(trainer):
            lines.append(f"  run folder: {folder}")
        checkpoint = trainer.checkpoint_callback
        path = checkpoint and (checkpoint.last_model_path or checkpoint.best_model_path)
        lines.append(f"  checkpoint: {path or 'none written'}")
        if shown := format_metrics(summary_metrics(dict(trainer.callback_metrics))):
            lines.append(f"  last metrics: {shown}")
        rank_zero_info("\n".join(lines))
