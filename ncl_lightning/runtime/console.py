"""What ``ncl-cli`` writes to a console that is not a terminal (a SLURM ``.out`` file, a
pipe, a CI log): [`LineProgress`][] instead of Lightning's per-batch progress bar, and a
default logger chosen so that Lightning has nothing to suggest.

Lightning redraws its progress bar for every batch (``\\r`` updates): in a terminal that
is one line, in a file it is thousands. When standard error is not a terminal,
``ncl-cli`` installs [`LineProgress`][] instead: one line per training epoch (batches,
time, the progress-bar metrics such as ``objective`` and ``val/online_acc``), and a line
every ``interval_s`` seconds inside a long epoch. In a terminal nothing changes.

* ``--trainer.enable_progress_bar false`` turns progress off, as ever;
* a progress bar the config lists is kept: ``--trainer.callbacks+=TQDMProgressBar``
  forces Lightning's per-batch bar into a file, ``--trainer.callbacks+=LineProgress``
  forces the lines in a terminal.

Lightning's default logger (``trainer.logger`` left unset) is a TensorBoard logger when
``tensorboard`` is installed and otherwise a ``CSVLogger`` after a note suggesting
``tensorboardX``; without TensorBoard, ``ncl-cli`` configures that same ``CSVLogger``
(``save_dir`` the ``default_root_dir``) itself ([`default_logger`][]).
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from jsonargparse import Namespace
from lightning.pytorch.callbacks import Callback, ProgressBar

from ncl_lightning.foundation.validation import check_at_least
from ncl_lightning.runtime.progress import format_duration

CSV_LOGGER = "lightning.pytorch.loggers.CSVLogger"


def is_terminal(stream: TextIO | None) -> bool:
    """Whether ``stream`` (default ``sys.stderr``, where progress goes) is a terminal."""
    stream = sys.stderr if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    return bool(isatty is not None and isatty())


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
    """Lightning progress for a log file: one line per training epoch (rank 0).

    Lines go to ``stderr`` (as Lightning's bar), flushed at once::

        Epoch 3/30: 11 batches in 1.2s | objective=5.3 val/online_acc=0.525

    Args:
        interval_s: Inside an epoch, also a line when this many seconds passed since the
            last one (``batch k/N``, batches per second); epochs shorter than that write
            one line.
        stream: Where lines go (``sys.stderr`` at the time of each line by default).
        clock: Seconds from a monotonic clock (injected by tests).
    """

    def __init__(
        self,
        interval_s: float = 120.0,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        check_at_least("interval_s", interval_s, 1)
        self.interval_s = interval_s
        self.stream = stream
        self.clock = clock
        self.enabled = True
        self._epoch_start = self._last_line = clock()
        self._batches = 0

    def disable(self) -> None:
        """No lines (Lightning disables the bar on ranks other than 0)."""
        self.enabled = False

    def enable(self) -> None:
        """Lines again."""
        self.enabled = True

    def _write(self, line: str) -> None:
        if self.enabled:
            print(line, file=self.stream or sys.stderr, flush=True)

    def _line(self, trainer: Any, pl_module: Any, head: str) -> str:
        metrics = {k: v for k, v in self.get_metrics(trainer, pl_module).items() if k != "v_num"}
        epoch = epoch_text(trainer, trainer.current_epoch + 1).capitalize()
        shown = format_metrics(metrics)
        return f"{epoch}: {head}" + (f" | {shown}" if shown else "")

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self._epoch_start = self._last_line = self.clock()
        self._batches = 0

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self._batches += 1
        now = self.clock()
        if now - self._last_line < self.interval_s:
            return
        self._last_line = now
        total = self.total_train_batches
        of = f"/{total}" if isinstance(total, int) else ""
        rate = self._batches / max(now - self._epoch_start, 1e-9)
        self._write(self._line(trainer, pl_module, f"batch {batch_idx + 1}{of}, {rate:.3g} it/s"))

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        took = format_duration(self.clock() - self._epoch_start)
        self._write(self._line(trainer, pl_module, f"{self._batches} batches in {took}"))


def progress_callbacks(
    trainer_config: dict[str, Any], stream: TextIO | None = None
) -> list[Callback]:
    """``[LineProgress()]`` when Lightning would draw its per-batch bar into a stream that
    is not a terminal, else ``[]``.

    Args:
        trainer_config: The instantiated ``trainer`` section (``enable_progress_bar``,
            ``callbacks``).
        stream: Where the bar would go (default ``sys.stderr``).
    """
    if trainer_config.get("enable_progress_bar") is False or is_terminal(stream):
        return []
    listed = trainer_config.get("callbacks") or []
    listed = listed if isinstance(listed, Sequence) else [listed]
    if any(isinstance(c, ProgressBar) for c in listed):
        return []  # the user's own bar
    return [LineProgress()]


def tensorboard_installed() -> bool:
    """Whether Lightning's default logger would be TensorBoard (``tensorboard`` or
    ``tensorboardX`` importable)."""
    return any(importlib.util.find_spec(name) for name in ("tensorboard", "tensorboardX"))


def default_logger(trainer_config: Any) -> None:
    """Without TensorBoard, configure Lightning's default ``CSVLogger`` (in place) where
    ``trainer.logger`` is unset or ``true``, so that Lightning has no note to print.

    Args:
        trainer_config: The parsed ``trainer`` section (a jsonargparse namespace).
    """
    if trainer_config.get("logger") not in (None, True) or tensorboard_installed():
        return
    root = trainer_config.get("default_root_dir") or os.getcwd()
    csv = Namespace(class_path=CSV_LOGGER, init_args=Namespace(save_dir=str(root)))
    trainer_config["logger"] = csv
