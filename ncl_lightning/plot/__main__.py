"""``python -m ncl_lightning.plot RUN [RUN ...]``: training and validation curves of CSV runs.

Reads Lightning ``CSVLogger`` files only (``<save_dir>/<name>/version_N/metrics.csv``); W&B
runs are not read. Several runs go on the same panels, one line (and legend entry) each.
Errors of input (a folder without ``metrics.csv``, an unreadable CSV, nothing to draw,
several versions without ``--all``) are one line, exit status 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from ncl_lightning.plot.curves import DEFAULT_PANELS, X_AXES, draw_curves
from ncl_lightning.plot.metrics_csv import load_runs
from ncl_lightning.runtime.errors import NCLError

PROG = "python -m ncl_lightning.plot"
OUT_NAME = "curves.png"


def default_out(runs: Sequence[Path]) -> Path:
    """``curves.png`` in the run folder (one run) or in the runs' common parent folder."""
    folders = [Path(r).parent if Path(r).is_file() else Path(r) for r in runs]
    common = Path(os.path.commonpath([f.resolve() for f in folders]))
    return (folders[0] if len(folders) == 1 else common) / OUT_NAME


def parser() -> argparse.ArgumentParser:
    """The command line of ``python -m ncl_lightning.plot``."""
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0].strip("`: "))
    p.add_argument(
        "runs",
        nargs="+",
        type=Path,
        metavar="RUN",
        help="a CSVLogger run: its save_dir (e.g. runs/demo/digits_ncl), a "
        "version_N folder or a metrics.csv; CSV only, W&B runs are not read",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help=f"PNG to write (default: {OUT_NAME} in the run folder, or in the "
        "runs' common parent folder)",
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
        "--all",
        action="store_true",
        dest="all_versions",
        help="draw every version_N found below a folder (default: refuse several)",
    )
    return p


def main(argv: Sequence[str] | None = None) -> None:
    """Draw the curves and print the file written; one-line errors, exit status 2."""
    args = parser().parse_args(argv)
    out = args.out if args.out is not None else default_out(args.runs)
    try:
        runs = load_runs(args.runs, args.labels, args.all_versions)
        panels = draw_curves(runs, out, args.metrics, args.x)
    except NCLError as err:
        sys.stderr.write(f"{PROG}: error: {err}\n")
        raise SystemExit(2) from None
    print(
        f"{out}: {len(runs)} run(s) ({', '.join(r.label for r in runs)}), x = {args.x}, "
        f"panels: {', '.join(panels)}"
    )


if __name__ == "__main__":
    main()
