"""Progress of long scripts (studies, the evaluation chain, benchmarks): one line per unit
on ``stderr`` (the scripts' tables stay alone on ``stdout``)::

    [run 3/105] landscape SimCLR sparsity=0.1 seed=2 | elapsed 4m12s | ETA 2h03m
    [run 3/105] done in 2m01s: landscape SimCLR sparsity=0.1 seed=2 | elapsed 6m13s | ETA 3h25m
    [run] 105 done in 3h31m (2 reused)

The ETA is ``elapsed / finished * remaining``; units reused from an earlier run (``skip``)
count as done but not in the mean. [`quiet_lightning`][] hides Lightning's per-run INFO
banners; [`library_notices_off`][] drops the notices no Lightning setting turns off.
"""

from __future__ import annotations

import logging
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from time import monotonic

# Lightning's loggers (the unified package and the standalone ones): every banner of a
# run is an INFO record of one of them or of a child.
LIGHTNING_LOGGERS = (
    "lightning.pytorch",
    "lightning.fabric",
    "pytorch_lightning",
    "lightning_fabric",
)
# ncl-cli arguments that turn off the progress bar and the model summary of one run.
QUIET_TRAINER_ARGS = ("--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false")
# torch >= 2.10 deprecates ``LeafSpec``, which Lightning's CombinedLoader builds for every
# loader (a FutureWarning from Lightning's code, not ours); Lightning's advertisements are
# INFO lines of its rank-zero logger that no setting turns off (Lightning issue #21294).
LEAFSPEC_NOTICE = r"`isinstance\(treespec, LeafSpec\)` is deprecated"
TIP_PREFIX = "\N{ELECTRIC LIGHT BULB} Tip:"
RANK_ZERO_LOGGERS = tuple(f"{name}.utilities.rank_zero" for name in LIGHTNING_LOGGERS)


def format_duration(seconds: float) -> str:
    """Short human duration: ``"3.2s"`` (< 10 s), ``"42s"``, ``"4m12s"``, ``"2h03m"``."""
    if seconds < 10:
        return f"{max(seconds, 0.0):.1f}s"
    whole = round(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    minutes = round(seconds / 60)
    return f"{minutes // 60}h{minutes % 60:02d}m"


@contextmanager
def library_notices_off() -> Iterator[None]:
    """Inside the block, drop the notices every Lightning run repeats and no setting
    turns off: torch's ``LeafSpec`` FutureWarning raised inside Lightning, and Lightning's
    "💡 Tip" advertisements (litlogger, litmodels). Everything else is kept."""
    loggers = [logging.getLogger(name) for name in RANK_ZERO_LOGGERS]

    def no_tip(record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(TIP_PREFIX)

    for logger in loggers:
        logger.addFilter(no_tip)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=LEAFSPEC_NOTICE, category=FutureWarning)
            yield
    finally:
        for logger in loggers:
            logger.removeFilter(no_tip)


@contextmanager
def quiet_lightning(verbose: bool = False) -> Iterator[None]:
    """Raise Lightning's loggers to ``WARNING`` inside the block; restore their levels after.

    Warnings and errors still show (but for the notices of [`library_notices_off`][]);
    only INFO banners are hidden. With ``verbose`` the block changes nothing (the
    scripts' ``--verbose`` flag; ``ncl-cli`` drops those notices itself).
    """
    if verbose:
        yield
        return
    loggers = [logging.getLogger(name) for name in LIGHTNING_LOGGERS]
    saved = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.WARNING)
    try:
        with library_notices_off():
            yield
    finally:
        for logger, level in zip(loggers, saved, strict=True):
            logger.setLevel(level)


class Progress:
    """``[label k/N]`` lines on ``stderr`` with the elapsed time and the ETA of ``total`` units.

    Example:
        >>> progress = Progress(3, "run")
        >>> for name in ("a", "b", "c"):
        ...     with progress.unit(name):
        ...         pass  # one training run
        >>> progress.finish()
    """

    def __init__(self, total: int, label: str = "run") -> None:
        self.total, self.label = total, label
        self.started_at = monotonic()
        self.finished = 0  # units run to their end (in the ETA's mean)
        self.skipped = 0  # units reused, done without work (not in the mean)
        self._starts: dict[str, float] = {}

    @property
    def done(self) -> int:
        """Units finished or skipped."""
        return self.finished + self.skipped

    def _write(self, head: str, remaining: int | None = None) -> None:
        elapsed = monotonic() - self.started_at
        if remaining is not None:  # ETA: mean time of a finished unit x units left
            eta = elapsed / self.finished * remaining if self.finished else None
            left = "?" if eta is None else format_duration(eta)
            head += f" | elapsed {format_duration(elapsed)} | ETA {left}"
        print(head, file=sys.stderr, flush=True)

    def start(self, description: str) -> None:
        """Announce the next unit (the ETA counts it as still to do)."""
        self._starts[description] = monotonic()
        index = self.done + len(self._starts)
        self._write(f"[{self.label} {index}/{self.total}] {description}", self.total - self.done)

    def end(self, description: str) -> None:
        """Close a unit opened by [`start`][] (or one run elsewhere, e.g. in a worker
        process: then its time is measured from the previous end)."""
        began = self._starts.pop(description, None)
        self.finished += 1
        took = "" if began is None else f" in {format_duration(monotonic() - began)}"
        remaining = self.total - self.done - len(self._starts)
        self._write(f"[{self.label} {self.done}/{self.total}] done{took}: {description}", remaining)

    def skip(self, description: str, reason: str = "reused") -> None:
        """Count a unit done without work (its result already exists; not started)."""
        self.skipped += 1
        self._write(f"[{self.label} {self.done}/{self.total}] {reason}: {description}")

    @contextmanager
    def unit(self, description: str) -> Iterator[None]:
        """``start`` before the block and ``end`` after it (not when it raises)."""
        self.start(description)
        yield
        self.end(description)

    def finish(self) -> str:
        """Write and return the summary line: units done and the total time."""
        reused = f" ({self.skipped} reused)" if self.skipped else ""
        took = format_duration(monotonic() - self.started_at)
        line = f"[{self.label}] {self.done}/{self.total} done in {took}{reused}"
        self._write(line)
        return line
