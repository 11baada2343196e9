"""Finding and reading Lightning ``CSVLogger`` files (``<save_dir>/<name>/version_N/metrics.csv``)
and offline W&B runs (``<run folder>/wandb/offline-run-*/run-<id>.wandb``) as the same
``(step, epoch, value)`` points, so both kinds of run are drawn alike.

The logger writes one row per logging call, leaving empty the columns of the keys that call
did not log; the reader keeps each column's filled cells only (the standard library's
[`csv`][], no pandas).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from ncl_lightning.foundation.errors import ConfigError, DataError, DataNotFoundError
from ncl_lightning.foundation.internals import history_rows, run_name

METRICS_FILE = "metrics.csv"
WANDB_FILE = "run-*.wandb"  # the record file of an offline W&B run folder
STEP_KEY, EPOCH_KEY = "trainer/global_step", "epoch"  # a W&B history row's step and epoch
INDEX_COLUMNS = ("epoch", "step")


class Point(NamedTuple):
    """One filled cell: the global ``step`` and ``epoch`` of its row and the ``value``
    (``nan`` when Lightning wrote ``nan``)."""

    step: int
    epoch: int | None
    value: float


@dataclass(frozen=True)
class RunCurves:
    """The logged series of one run (CSV or offline W&B).

    Attributes:
        label: The name shown in the legend (the logger's or W&B run's name, ``digits_ncl``).
        path: The ``metrics.csv`` read.
        series: Column name -> its filled cells in file order; columns never filled are left
            out, and so are ``epoch`` and ``step``.
    """

    label: str
    path: Path
    series: dict[str, list[Point]]


def _run_files(folder: Path, pattern: str) -> list[Path]:
    """``metrics.csv`` or ``run-*.wandb`` files: those in ``folder``, else those below it."""
    here = sorted(folder.glob(pattern))
    return here if here else sorted(folder.rglob(pattern))


def find_metrics(folder: Path, all_versions: bool = False) -> list[Path]:
    """The ``metrics.csv`` files (and offline W&B ``run-<id>.wandb`` files) of the run at
    ``folder``.

    Args:
        folder: A version folder holding ``metrics.csv``, an ``offline-run-*`` folder, the
            file itself, or any folder above (a run root such as ``runs/demo/digits_ncl``
            holding ``<name>/version_N/``, or ``runs/cifar10_ncl`` holding
            ``<run id>/wandb/offline-run-*/``); or the run folder ``ncl-cli`` prints for a
            W&B run, ``<save_dir>/<name>/<run id>``, whose W&B files are
            ``<run folder>/wandb/offline-run-*-<run id>/`` (found by the id first: the run
            folder also holds the W&B runs of its tests, ``test/<test id>/wandb/``; a run
            logged before 2026-11-30 has them in ``<save_dir>/wandb/``).
        all_versions: Return every run file found below ``folder``; otherwise more than one
            is refused.

    Returns:
        The files, sorted by path.

    Raises:
        DataNotFoundError: ``folder`` does not exist or holds no ``metrics.csv``.
        ConfigError: Several files were found and ``all_versions`` is false.
    """
    folder = Path(folder)
    if folder.is_file():
        return [folder]
    if not folder.is_dir():
        raise DataNotFoundError(f"{folder}: no such file or folder")
    if (folder / METRICS_FILE).is_file():
        return [folder / METRICS_FILE]
    own = f"wandb/offline-run-*-{folder.name}/{WANDB_FILE}"  # a W&B run's, by its id
    found = sorted(folder.glob(own)) or sorted(folder.parent.parent.glob(own))
    found = found or _run_files(folder, METRICS_FILE) + _run_files(folder, WANDB_FILE)
    if not found:
        raise DataNotFoundError(
            f"{folder}: no {METRICS_FILE} and no {WANDB_FILE} below it; expected a CSVLogger "
            f"run (<save_dir>/<name>/version_N/{METRICS_FILE}) or an offline W&B run "
            f"(<run folder>/wandb/offline-run-*/{WANDB_FILE})"
        )
    if len(found) > 1 and not all_versions:
        names = ", ".join(
            str(p.parent.relative_to(folder)) if p.is_relative_to(folder) else str(p.parent)
            for p in found
        )
        raise ConfigError(
            f"{folder}: {len(found)} runs below it ({names}); pass one of them, "
            f"or --all (all_versions=True) to draw them all",
            key="runs",
        )
    return found


def _number(cell: str, path: Path, line: int, column: str) -> float:
    """``float(cell)``, or a [`DataError`][] naming the file, line and column."""
    try:
        return float(cell)
    except ValueError:
        raise DataError(f"{path}:{line}: column {column!r}: {cell!r} is not a number") from None


def read_metrics(path: Path) -> dict[str, list[Point]]:
    """Read one Lightning ``CSVLogger`` ``metrics.csv`` into its filled cells per column.

    Returns:
        Column -> points ``(step, epoch, value)`` of its non-empty cells, in file order
        (``epoch`` ``None`` in a file without an ``epoch`` column).

    Raises:
        DataError: The file cannot be read or decoded, has no header or no ``step`` column, a
            row has the wrong number of cells (a truncated write), or a cell is not a number.
    """
    path = Path(path)
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            rows = list(csv.reader(handle))
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise DataError(f"{path}: cannot read the CSV ({err})") from None
    if not rows or not rows[0]:
        raise DataError(f"{path}: empty file, no header row")
    header = rows[0]
    if "step" not in header:
        raise DataError(f"{path}: no 'step' column; not a Lightning CSVLogger {METRICS_FILE}")
    step_at, epoch_at = header.index("step"), header.index("epoch") if "epoch" in header else None
    series: dict[str, list[Point]] = {}
    for line, row in enumerate(rows[1:], start=2):
        if len(row) != len(header):
            raise DataError(
                f"{path}:{line}: {len(row)} cells for {len(header)} columns (a truncated write?)"
            )
        step = _number(row[step_at], path, line, "step")
        epoch = None if epoch_at is None else _number(row[epoch_at], path, line, "epoch")
        if not math.isfinite(step) or (epoch is not None and not math.isfinite(epoch)):
            raise DataError(f"{path}:{line}: step/epoch must be finite numbers")
        for column, cell in zip(header, row, strict=True):
            if column in INDEX_COLUMNS or cell == "":
                continue
            value = _number(cell, path, line, column)
            point = Point(int(step), None if epoch is None else int(epoch), value)
            series.setdefault(column, []).append(point)
    return series


def run_label(path: Path) -> str:
    """The logger name of a ``<name>/version_N/metrics.csv`` (the folder above the version
    folder); the run's name of a ``run-<id>.wandb`` (``wandb.init(name=...)``, e.g. the
    config's name), else the folder holding its ``wandb`` folder (the run folder); the
    file's own folder name otherwise."""
    folder = Path(path).parent
    if Path(path).suffix == ".wandb" and (name := run_name(Path(path))):
        return name
    if folder.parent.name == "wandb" and folder.parent.parent.name:
        return folder.parent.parent.name
    if folder.name.startswith("version_") and folder.parent.name:
        return folder.parent.name
    return folder.name or str(folder)


def load_runs(
    runs: Sequence[Path],
    labels: Sequence[str] | None = None,
    all_versions: bool = False,
) -> list[RunCurves]:
    """Find and read the CSV and offline W&B runs at ``runs`` (see [`find_metrics`][]).

    Args:
        runs: Run folders, version folders, ``offline-run-*`` folders, ``metrics.csv`` or
            ``run-<id>.wandb`` files.
        labels: One legend label per run file found; default: each logger's name (the
            run's name for W&B), made unique with ``/version_N`` (``/offline-run-…``, then
            the full folder) where two runs share it.
        all_versions: Draw every run found below a folder.

    Returns:
        One [`RunCurves`][] per ``metrics.csv``, in the order of ``runs``.

    Raises:
        ConfigError: ``labels`` does not give one label per file found, or no run is given.
    """
    if not runs:
        raise ConfigError("runs: give at least one run folder", key="runs")
    paths = [p for run in runs for p in find_metrics(Path(run), all_versions)]
    if labels is None:
        labels = [run_label(p) for p in paths]
        for unique in (lambda p: f"{run_label(p)}/{p.parent.name}", lambda p: str(p.parent)):
            if len(set(labels)) < len(labels):
                labels = [unique(p) for p in paths]
    elif len(labels) != len(paths):
        raise ConfigError(
            f"labels: {len(labels)} given for {len(paths)} runs "
            f"({', '.join(str(p) for p in paths)})",
            key="labels",
        )
    return [
        RunCurves(label, p, read_history(p) if p.suffix == ".wandb" else read_metrics(p))
        for label, p in zip(labels, paths, strict=True)
    ]


def read_history(path: Path) -> dict[str, list[Point]]:
    """The series of an offline W&B ``run-<id>.wandb`` file as [`read_metrics`][] reads a
    ``metrics.csv``: each key's values with the ``trainer/global_step`` and ``epoch`` of
    their row (no epoch where the row has none; a row without a global step, which
    Lightning never logs, is skipped). A file cut short (a killed run) is read up to its
    last whole record.

    Raises:
        DataError: Not a W&B run file.
    """
    series: dict[str, list[Point]] = {}
    for row in history_rows(Path(path)):
        step = row.get(STEP_KEY)
        epoch = row.get(EPOCH_KEY)
        for key, value in row.items():
            if key in (STEP_KEY, EPOCH_KEY) or step is None:
                continue
            point = Point(int(step), None if epoch is None else int(epoch), value)
            series.setdefault(key, []).append(point)
    return series
