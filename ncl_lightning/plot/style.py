"""One look for every figure of the package: grids, curves and heat maps.

Matplotlib settings (font sizes, colours, dpi, text kept as text in PDF and SVG) live in
[`STYLE`][ncl_lightning.plot.style.STYLE] and are applied only inside
[`figure_style`][ncl_lightning.plot.style.figure_style] (a ``matplotlib.rc_context``), so no
global matplotlib state is changed. Figures are ``matplotlib.figure.Figure`` objects on an
Agg canvas (files only, no display, no pyplot state); [`save_figure`][] writes a figure as
PNG and, when asked, as PDF and SVG beside it (vector output for papers).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import matplotlib
from cycler import cycler
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.foundation.validation import check_choice

DPI = 100  # pixels per inch of the PNG files (their pixel size is figsize * DPI)
FORMATS = ("png", "pdf", "svg")  # what figure functions can write
# Matplotlib's ten default colours, named so that a run keeps its colour in every figure.
COLOURS = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
)  # fmt: skip
SEQUENTIAL_CMAP = "viridis"  # heat maps of values
DIVERGING_CMAP = "RdBu_r"  # correlations in [-1, 1]
TITLE_SIZE, LABEL_SIZE, TICK_SIZE, SMALL_SIZE = 10, 9, 8, 7  # points

STYLE: dict[str, object] = {
    "font.family": "DejaVu Sans",  # shipped with matplotlib: the same text on every machine
    "font.size": LABEL_SIZE,
    "axes.titlesize": TITLE_SIZE,
    "axes.labelsize": LABEL_SIZE,
    "xtick.labelsize": TICK_SIZE,
    "ytick.labelsize": TICK_SIZE,
    "legend.fontsize": TICK_SIZE,
    "figure.titlesize": TITLE_SIZE + 1,
    "axes.prop_cycle": cycler(color=list(COLOURS)),
    "axes.spines.top": False,
    "axes.spines.right": False,
    "grid.alpha": 0.3,
    "lines.linewidth": 1.2,
    "image.cmap": SEQUENTIAL_CMAP,
    "image.interpolation": "nearest",  # pixels stay pixels: no blur
    "figure.dpi": DPI,
    "savefig.dpi": DPI,
    "figure.facecolor": "white",
    "savefig.facecolor": "white",
    "pdf.fonttype": 42,  # TrueType in PDF: text stays text (editable, searchable)
    "ps.fonttype": 42,
    "svg.fonttype": "none",  # SVG text as <text>, not paths
    "svg.hashsalt": "ncl_lightning",  # the same SVG ids on every run
}


@contextmanager
def figure_style() -> Iterator[None]:
    """Apply [`STYLE`][ncl_lightning.plot.style.STYLE] inside the block only (the global
    ``matplotlib.rcParams`` are restored on exit). Create and save figures inside it: font
    sizes are read when artists are made, the dpi and font types when files are written."""
    with matplotlib.rc_context(STYLE):
        yield


def new_figure(size: tuple[float, float], **kwargs: object) -> Figure:
    """A figure of ``size`` inches at [`DPI`][ncl_lightning.plot.style.DPI] on an Agg
    canvas (not registered with pyplot: nothing to close, nothing shown)."""
    fig = Figure(figsize=size, dpi=DPI, **kwargs)  # type: ignore[arg-type]
    FigureCanvasAgg(fig)
    return fig


def check_formats(formats: Sequence[str], key: str = "formats") -> tuple[str, ...]:
    """The file formats asked for, checked, without repeats, in the order given.

    Raises:
        ConfigError: Naming ``key``: an empty list, a string instead of a list, or an
            unknown format (the valid ones are listed).
    """
    if isinstance(formats, str):
        raise ConfigError(
            f"{key}: give a list of formats, e.g. [{formats!r}], not a string", key=key
        )
    if not formats:
        raise ConfigError(f"{key}: give at least one of {', '.join(FORMATS)}", key=key)
    for fmt in formats:
        check_choice(key, fmt, FORMATS)
    return tuple(dict.fromkeys(formats))


def save_figure(fig: Figure, path: Path, formats: Sequence[str] = ("png",)) -> list[Path]:
    """Write ``fig`` (made inside [`figure_style`][]) as ``path`` with each suffix of
    ``formats`` (``x.png``, ``x.pdf``, ``x.svg``), at a fixed size (no tight bounding box)
    and without time stamps, so the files depend only on the figure; returns the files
    written, in the order of ``formats``."""
    written = []
    metadata = {"pdf": {"CreationDate": None, "ModDate": None}, "svg": {"Date": None}}
    with figure_style():
        for fmt in check_formats(formats):
            out = Path(path).with_suffix(f".{fmt}")
            fig.savefig(out, format=fmt, dpi=DPI, metadata=metadata.get(fmt))
            written.append(out)
    return written
