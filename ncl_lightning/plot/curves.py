"""Training and validation curves of CSV and W&B runs: panels chosen from the logged columns.

One panel per metric, one line per run (the same colour in every panel, one legend above the
panels), ``min(3, panels)`` columns of 4 x 3 inch panels at a fixed dpi.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg  # files only, no display
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from ncl_lightning.foundation.errors import ConfigError, DataError, did_you_mean
from ncl_lightning.foundation.validation import check_choice, check_output_dir
from ncl_lightning.plot.metrics_csv import Point, RunCurves, load_runs
from ncl_lightning.plot.style import (
    COLOURS,
    DPI,
    FORMATS,
    LABEL_SIZE,
    SMALL_SIZE,
    TICK_SIZE,
    TITLE_SIZE,
    check_formats,
    figure_style,
    new_figure,
    save_figure,
)

# Drawn when logged, in this order. ``lr`` stands for LearningRateMonitor's ``lr-<Optimizer>``
# columns (one panel each).
DEFAULT_PANELS = (
    "train/loss",
    "val/online_acc",
    "val/knn_acc",
    "val/z/sparsity",
    "val/z/semantic_consistency",
    "val/gate/open_rate",
    "lr",
)
LR_ALIAS, LR_PREFIX = "lr", "lr-"
X_AXES = ("step", "epoch")
X_LABELS = {"step": "step (global training step)", "epoch": "epoch (mean of its logged values)"}
PANEL_SIZE = (4.0, 3.0)  # inches
MAX_COLUMNS = 3
MARKER_MAX = 60  # series with at most this many points get a marker (validation curves)
# What ``--out``'s extension may be: the Agg canvas' file types (pgf needs LaTeX; raw/rgba
# are unframed pixel dumps).
IMAGE_FORMATS = tuple(
    sorted(set(FigureCanvasAgg.get_supported_filetypes()) - {"pgf", "raw", "rgba"})
)


def check_out(out: Path, key: str = "out") -> None:
    """``out`` can be written as an image: a known extension ([`IMAGE_FORMATS`][]), not a
    folder, not a read-only file, in a folder that is (or can be made) writable; nothing is
    written. Raises a ConfigError naming ``key`` and the path."""
    out = Path(out)
    formats = ", ".join(IMAGE_FORMATS)
    if out.is_dir():
        raise ConfigError(
            f"{key}: {out} is a folder; give the image file, e.g. {out / 'curves.png'}", key=key
        )
    suffix = out.suffix.lower().lstrip(".")
    if not suffix:
        raise ConfigError(
            f"{key}: {out} has no file extension; give e.g. {out}.png (formats: {formats})",
            key=key,
        )
    if suffix not in IMAGE_FORMATS:
        raise ConfigError(
            f"{key}: unknown image format {out.suffix!r} of {out}; valid: {formats}", key=key
        )
    check_output_dir(key, out.parent)
    if out.exists() and not os.access(out, os.W_OK):
        raise ConfigError(f"{key}: {out}: the file exists and is not writable", key=key)


def _expand(name: str, present: Sequence[str]) -> list[str]:
    """The logged columns ``name`` stands for: itself, or every ``lr-*`` column for ``lr``."""
    if name == LR_ALIAS:
        return [c for c in present if c.startswith(LR_PREFIX)]
    return [name] if name in present else []


def choose_panels(runs: Sequence[RunCurves], metrics: Sequence[str] | None = None) -> list[str]:
    """The columns to draw, one panel each.

    Args:
        runs: The runs read by [`load_runs`][ncl_lightning.plot.metrics_csv.load_runs].
        metrics: The columns wanted (``lr`` for the learning-rate columns); default: those of
            ``DEFAULT_PANELS`` that at least one run logged.

    Returns:
        Column names in panel order, without repeats.

    Raises:
        DataError: No run logged any metric, or none of the default ones.
        ConfigError: A column of ``metrics`` that no run logged (with the closest one).
    """
    present = sorted({column for run in runs for column in run.series})
    files = ", ".join(str(run.path) for run in runs)
    if not present:
        raise DataError(f"{files}: no metric logged (only epoch/step, or no rows)")
    if metrics is None:
        panels = [c for name in DEFAULT_PANELS for c in _expand(name, present)]
        if not panels:
            shown = ", ".join(present[:12]) + (", ..." if len(present) > 12 else "")
            raise DataError(
                f"{files}: none of the default metrics ({', '.join(DEFAULT_PANELS)}) was "
                f"logged; pick columns with --metrics (logged: {shown})"
            )
    else:
        panels = []
        for name in metrics:
            found = _expand(name, present)
            if not found:
                raise ConfigError(
                    f"metrics: {name!r} was not logged in {files}{did_you_mean(name, present)}",
                    key="metrics",
                )
            panels += found
    return list(dict.fromkeys(panels))


def _xy(points: Sequence[Point], x: str) -> tuple[list[float], list[float]]:
    """The points against ``step``, or averaged per ``epoch`` (in epoch order)."""
    if x == "step":
        return [float(p.step) for p in points], [p.value for p in points]
    groups: dict[int, list[float]] = {}
    for p in points:
        groups.setdefault(p.epoch, []).append(p.value)  # type: ignore[arg-type]
    epochs = sorted(groups)
    return [float(e) for e in epochs], [sum(groups[e]) / len(groups[e]) for e in epochs]


def figure_size(num_panels: int) -> tuple[int, int]:
    """``(width, height)`` in pixels of the figure of [`curves_figure`][]."""
    cols = min(MAX_COLUMNS, num_panels)
    rows = math.ceil(num_panels / cols)
    return round(cols * PANEL_SIZE[0] * DPI), round(rows * PANEL_SIZE[1] * DPI)


def curves_figure(runs: Sequence[RunCurves], panels: Sequence[str], x: str = "step") -> Figure:
    """Draw ``panels`` for every run (not saved; no pyplot state).

    Args:
        runs: The runs, one line (colour ``C{i}``, label ``run.label``) per panel that it
            logged.
        panels: Column names, from [`choose_panels`][].
        x: ``"step"`` (the global step of each logged value) or ``"epoch"`` (values
            averaged over each epoch).

    Returns:
        The figure, with one axis per panel in order (each titled with its column).

    Raises:
        ConfigError: ``x`` is not ``step`` or ``epoch``, or ``panels`` is empty.
        DataError: ``x="epoch"`` for a file without an ``epoch`` column.
    """
    check_choice("x", x, X_AXES)
    if not panels:
        raise ConfigError("panels: at least one column to draw", key="panels")
    if x == "epoch":
        for run in runs:
            if any(p.epoch is None for points in run.series.values() for p in points):
                raise DataError(f"{run.path}: no 'epoch' column; draw against x='step'")
    width, height = figure_size(len(panels))
    with figure_style():
        fig = new_figure((width / DPI, height / DPI), layout="constrained")
        cols = min(MAX_COLUMNS, len(panels))
        axes = fig.subplots(math.ceil(len(panels) / cols), cols, squeeze=False).ravel()
        for ax, column in zip(axes, panels, strict=False):
            for i, run in enumerate(runs):
                points = run.series.get(column)
                if not points:
                    continue
                xs, ys = _xy(points, x)
                marker = "o" if len(xs) <= MARKER_MAX else None
                colour = COLOURS[i % len(COLOURS)]
                ax.plot(xs, ys, color=colour, label=run.label, marker=marker, markersize=3)
            ax.set_title(column, fontsize=TITLE_SIZE)
            ax.set_xlabel(X_LABELS[x], fontsize=TICK_SIZE)
            ax.grid(True)
        for ax in axes[len(panels) :]:
            fig.delaxes(ax)
        handles = [
            Line2D([], [], color=COLOURS[i % len(COLOURS)], label=r.label)
            for i, r in enumerate(runs)
        ]
        fig.legend(
            handles=handles, loc="outside upper center", ncols=min(len(runs), 4),
            fontsize=LABEL_SIZE,
        )  # fmt: skip
    return fig


def draw_curves(
    runs: Sequence[RunCurves],
    out: Path,
    metrics: Sequence[str] | None = None,
    x: str = "step",
    formats: Sequence[str] | None = None,
) -> list[str]:
    """Choose the panels, draw them and write the image to ``out`` (parents created);
    every argument is checked before anything is written.

    Args:
        formats: Also write ``out`` with these suffixes (some of ``png``, ``pdf``, ``svg``:
            vector files beside the PNG); None: only ``out``, in its own format.

    Returns:
        The columns drawn, in panel order.
    """
    check_out(out)
    extra = () if formats is None else check_formats(formats)
    panels = choose_panels(runs, metrics)
    fig = curves_figure(runs, panels, x)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    beside = [f for f in extra if f != out.suffix.lower().lstrip(".")]
    own = out.suffix.lstrip(".")
    if own in FORMATS:  # written like every other figure of the package
        save_figure(fig, out, [own, *beside])
        return panels
    with figure_style():  # another of matplotlib's formats (jpg, tif, ...) or an upper-case one
        fig.savefig(out, dpi=DPI)
    if beside:
        save_figure(fig, out, beside)
    return panels


def plot_curves(
    runs: Sequence[Path],
    out: Path,
    labels: Sequence[str] | None = None,
    *,
    metrics: Sequence[str] | None = None,
    x: str = "step",
    all_versions: bool = False,
    formats: Sequence[str] | None = None,
) -> Path:
    """Draw the training and validation curves of CSV-logged and offline W&B runs into one PNG.

    ``plot_curves([Path("runs/demo/digits_cl"), Path("runs/demo/digits_ncl")],
    Path("runs/demo/curves.png"), labels=["CL", "NCL"])`` puts both runs on the same
    panels. Lightning ``CSVLogger`` files and offline W&B runs are read, as by
    ``python -m ncl_lightning.plot`` ([`load_runs`][ncl_lightning.plot.load_runs]).

    Args:
        runs: Run folders (``<save_dir>`` holding ``<name>/version_N/metrics.csv``, a W&B
            run's folder holding ``wandb/offline-run-*``), version or ``offline-run-*``
            folders, ``metrics.csv`` or ``run-<id>.wandb`` files; each must hold a single
            run unless ``all_versions``.
        out: The PNG to write.
        labels: Legend label per ``metrics.csv`` found; default: the logger names.
        metrics: Columns to draw; default: the logged ones of ``DEFAULT_PANELS``.
        x: ``"step"`` or ``"epoch"``.
        all_versions: Draw every version below a folder instead of refusing several.
        formats: Also write ``out`` as these formats beside it (``["pdf", "svg"]``: vector
            files for a paper, ``out.pdf`` and ``out.svg``).

    Returns:
        ``out``.

    Raises:
        DataNotFoundError: A path that does not exist or holds no ``metrics.csv``.
        DataError: An unreadable CSV or W&B run file, or nothing to draw.
        ConfigError: Several versions without ``all_versions``, wrong ``labels``, an unknown
            metric or ``x``.
    """
    draw_curves(load_runs(runs, labels, all_versions), out, metrics, x, formats)
    return Path(out)


def mean_std_curves(
    panels: dict[str, dict[str, list[tuple[Sequence[float], Sequence[float]]]]],
    path: Path,
    xlabel: str,
    ylabel: str = "",
) -> Path:
    """Save the studies' curves over seeds: one panel per title, one line per label, the
    mean ± std (sample std) of its runs' ``(x, y)`` curves, cut to the shortest run.
    Returns the PNG written."""
    with figure_style():
        fig = new_figure((PANEL_SIZE[0] * len(panels), PANEL_SIZE[1]), layout="constrained")
        axes = fig.subplots(1, len(panels), squeeze=False)[0]
        for ax, (title, lines) in zip(axes, panels.items(), strict=True):
            for label, runs in lines.items():
                length = min(len(y) for _, y in runs)
                ys = np.array([y[:length] for _, y in runs])
                std = ys.std(0, ddof=1) if len(runs) > 1 else np.zeros(length)
                xs, mean = runs[0][0][:length], ys.mean(0)
                marker = "o" if length <= MARKER_MAX else None
                ax.plot(xs, mean, label=label, marker=marker, markersize=3)
                ax.fill_between(xs, mean - std, mean + std, alpha=0.2)
            ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
            ax.grid(True)
            ax.legend(fontsize=SMALL_SIZE)
    return save_figure(fig, path)[0]
