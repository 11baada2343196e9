"""Training and validation curves of CSV-logged and offline W&B runs, drawn into one PNG.

``python -m ncl_lightning.plot runs/demo/digits_ncl [more runs] [--out curves.png]`` reads
Lightning ``CSVLogger`` files (``<save_dir>/<name>/version_N/metrics.csv``) and draws one
panel per logged metric of interest (train loss, online and kNN accuracy, sparsity,
semantic consistency, gate open rate, learning rate), one line per run. From Python:
[`plot_curves`][]. Both read offline W&B runs too (``<run folder>/wandb/offline-run-*``,
by [`read_history`][]).
"""

from ncl_lightning.plot.curves import (
    DEFAULT_PANELS,
    choose_panels,
    curves_figure,
    draw_curves,
    figure_size,
    plot_curves,
)
from ncl_lightning.plot.metrics_csv import (
    Point,
    RunCurves,
    find_metrics,
    load_runs,
    read_history,
    read_metrics,
    run_label,
)

__all__ = [
    "DEFAULT_PANELS",
    "Point",
    "RunCurves",
    "choose_panels",
    "curves_figure",
    "draw_curves",
    "figure_size",
    "find_metrics",
    "load_runs",
    "plot_curves",
    "read_history",
    "read_metrics",
    "run_label",
]
