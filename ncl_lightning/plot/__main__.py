"""``python -m ncl_lightning.plot RUN [RUN ...]``: curves of CSV and offline W&B runs.

Several runs go on the same panels, one line (and legend entry) each. Every input is checked
before anything is written ([`check_inputs`][]); bad input is one line
``python -m ncl_lightning.plot: error: <key or path>: <problem>``, exit status 2.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from pathlib import Path

from ncl_lightning.plot.curves import (
    DEFAULT_PANELS,
    IMAGE_FORMATS,
    X_AXES,
    check_out,
    choose_panels,
    draw_curves,
)
from ncl_lightning.plot.metrics_csv import RunCurves, load_runs
from ncl_lightning.plot.style import FORMATS, check_formats
from ncl_lightning.runtime.errors import ToolArgumentParser, run_main

PROG = "python -m ncl_lightning.plot"
OUT_NAME = "curves.png"


def default_out(runs: Sequence[Path]) -> Path:
    """``curves.png`` in the run folder (one run) or in the runs' common parent folder."""
    folders = [Path(r).parent if Path(r).is_file() else Path(r) for r in runs]
    common = Path(os.path.commonpath([f.resolve() for f in folders]))
    return (folders[0] if len(folders) == 1 else common) / OUT_NAME


def parser() -> argparse.ArgumentParser:
    """The command line of ``python -m ncl_lightning.plot``."""
    p = ToolArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0].strip("`: "))
    p.add_argument(
        "runs",
        nargs="+",
        type=Path,
        metavar="RUN",
        help="a CSVLogger run: its save_dir (e.g. runs/demo/digits_ncl), a "
        "version_N folder or a metrics.csv; or an offline W&B run: the run folder ncl-cli "
        "prints (e.g. runs/cifar10_ncl/<run id>), its wandb/offline-run-* folder or its "
        "run-<id>.wandb file",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help=f"image to write, by its extension: {', '.join(IMAGE_FORMATS)} (default: "
        f"{OUT_NAME} in the run folder, or in the runs' common parent folder)",
    )
    p.add_argument(
        "--metrics",
        nargs="+",
        default=None,
        metavar="COLUMN",
        help="columns to draw, one panel each ('lr' = the lr-* columns); default: "
        f"those logged of {', '.join(DEFAULT_PANELS)}",
    )
    p.add_argument(
        "--labels",
        nargs="+",
        default=None,
        metavar="LABEL",
        help="legend label per run (default: the logger names)",
    )
    p.add_argument(
        "--x",
        choices=X_AXES,
        default="step",
        help="x axis: the global step, or the epoch (values averaged per epoch)",
    )
    p.add_argument(
        "--formats",
        nargs="+",
        default=None,
        metavar="FORMAT",
        help=f"also write the image as these formats beside --out ({', '.join(FORMATS)}; "
        "pdf and svg are vector files for papers), e.g. --formats pdf svg",
    )
    p.add_argument(
        "--all",
        action="store_true",
        dest="all_versions",
        help="draw every version_N found below a folder (default: refuse several)",
    )
    return p


def check_inputs(args: argparse.Namespace) -> tuple[list[RunCurves], Path]:
    """Every argument, before anything is written: the output file (format, folder), the
    runs (found, readable, one version each unless ``--all``), the labels and the metrics;
    returns the runs read and the image to write."""
    out = args.out if args.out is not None else default_out(args.runs)
    check_out(out, "--out")
    if args.formats is not None:
        check_formats(args.formats, "--formats")
    runs = load_runs(args.runs, args.labels, args.all_versions)
    choose_panels(runs, args.metrics)
    return runs, out


def main(argv: Sequence[str] | None = None) -> None:
    """Draw the curves and print the file written; one-line errors, exit status 2."""
    args = parser().parse_args(argv)

    def plot() -> None:
        runs, out = check_inputs(args)
        panels = draw_curves(runs, out, args.metrics, args.x, args.formats)
        names = ", ".join(r.label for r in runs)
        print(f"{out}: {len(runs)} run(s) ({names}), x = {args.x}, panels: {', '.join(panels)}")

    run_main(PROG, plot)


if __name__ == "__main__":
    main()
