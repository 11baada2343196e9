"""``make demo``: CL, NCL and BayesNCL on scikit-learn's bundled digits, side by side, on CPU.

Fits the packaged configs ``demo/digits_{cl,ncl,bayesncl}`` (or ``--configs``: files or
packaged names) through the real ``ncl-cli`` entry point, then prints one table of the final
validation numbers (``<out>/results.md``) and writes the top-activation pictures side by
side, the runs' curves (``<out>/curves.png``) and the feature atlas of their last
checkpoints (``<out>/atlas/index.html``).

The table's majority-share column is measured on the picture itself: the mean, over its
rows, of the share of each row's majority class among the row's images, as
[`TopActivations`][ncl_lightning.callbacks.TopActivations] drew and logged it; the lines
under the table give each row's share, top row first.
[`caption`][ncl_lightning.demo.caption] turns such a table (``results.md``, or the README's
copy) into the sentence the README's picture caption holds.
"""

from __future__ import annotations

import argparse
import re
import time
from pathlib import Path
from typing import NamedTuple

import torch
import yaml
from lightning.pytorch.loggers import CSVLogger

from ncl_lightning.atlas import build_atlas
from ncl_lightning.callbacks import TopActivations
from ncl_lightning.callbacks.top_activations import RowMajority
from ncl_lightning.foundation.errors import DataError
from ncl_lightning.foundation.resources import config_file, config_root
from ncl_lightning.foundation.validation import check_at_least, check_output_dir
from ncl_lightning.plot import plot_curves
from ncl_lightning.plot.pictures import side_by_side
from ncl_lightning.runtime.errors import ToolArgumentParser, run_main
from ncl_lightning.studies.jobs import cli_here, folder_args, run_jobs

PROG = "python -m ncl_lightning.demo"
DEFAULT = [f"demo/digits_{m}" for m in ("cl", "ncl", "bayesncl")]
COLUMNS = {
    "online linear acc": ("val/online_acc", "{:.1%}"),
    "kNN acc": ("val/knn_acc", "{:.1%}"),
    "z sparsity": ("val/z/sparsity", "{:.1%}"),
    "active dims": ("val/z/active_dims", "{:.0f}"),
    "semantic consistency": ("val/z/semantic_consistency", "{:.1f}"),
    "H_s (nats)": ("val/z/semantic_entropy", "{:.2f}"),
    "gate open rate": ("val/gate/open_rate", "{:.1%}"),
}
SHARE_AFTER = "semantic consistency"  # the picture's column follows the other class metric
SHARE_FORMAT = "{:.0%}"  # k = 10 images per row: every row share, and their mean over 10
# rows, is a whole percent
SHARE_TITLE = "majority share ({rows} rows × {images} images)"
SHARE_TITLE_MIXED = "majority share (rows listed below)"  # models drew different grids
_SHARE_HEADER = re.compile(r"^majority share \((?:(\d+) rows × \d+ images|rows listed below)\)$")


def label(config: Path) -> str:
    """How the report names a config: ``configs/<name>.yaml`` for a packaged one, else its path."""
    root = config_root()
    packaged = config.is_relative_to(root)
    return f"configs/{config.relative_to(root).as_posix()}" if packaged else str(config)


def method_name(config: Path) -> str:
    """Row name of a config: its model class (``CL``, ``NCL``, ...)."""
    return yaml.safe_load(config.read_text())["model"]["class_path"].rsplit(".", 1)[-1]


class Run(NamedTuple):
    """What the demo keeps of one fit."""

    metrics: dict[str, float]
    picture: Path | None  # top-activation PNG
    log_dir: Path | None  # the CSV logger's version folder
    majority: RowMajority | None  # the picture's rows: majority class and share


def run(config: Path, out: Path, extra: list[str]) -> Run:
    """Fit one config; return its final logged metrics, top-activation PNG, log folder and
    the picture's row majorities."""
    args = ["fit", "--config", str(config), *folder_args(out, verbose=True)]
    cli = cli_here([*args, *extra], verbose=True)  # Lightning's banners kept
    drawers = [c for c in cli.trainer.callbacks if isinstance(c, TopActivations)]
    picture = drawers[0].last_paths.get("top_activations") if drawers else None
    majority = drawers[0].last_majority if drawers else None
    logger = cli.trainer.logger
    log_dir = Path(logger.log_dir) if isinstance(logger, CSVLogger) else None
    metrics = {k: float(v) for k, v in cli.trainer.callback_metrics.items()}
    return Run(metrics, picture, log_dir, majority)


def share_title(majority: dict[str, RowMajority | None]) -> str:
    """The majority-share column's header: the grid's rows and images per row."""
    shapes = {(len(m.shares), m.images) for m in majority.values() if m is not None}
    if len(shapes) != 1:
        return SHARE_TITLE_MIXED
    ((rows, images),) = shapes
    return SHARE_TITLE.format(rows=rows, images=images)


def table(
    results: dict[str, dict[str, float]],
    dims: dict[str, int],
    majority: dict[str, RowMajority | None] | None = None,
) -> str:
    """Markdown table, one row per method.

    Args:
        results: Method -> its final logged metrics (``val/...`` keys).
        dims: Method -> width of ``z`` (the denominator of ``active dims``).
        majority: Method -> the row majorities of its top-activation picture
            (``TopActivations.last_majority``); given, the table has the column of their
            mean after ``semantic consistency`` (``n/a`` for a method without one).
    """
    heads = list(COLUMNS)
    if majority is not None:
        heads.insert(heads.index(SHARE_AFTER) + 1, share_title(majority))
    lines = ["| method | " + " | ".join(heads) + " |", "|---" * (len(heads) + 1) + "|"]
    for method, metrics in results.items():
        cells = []
        for title, (key, fmt) in COLUMNS.items():
            cell = fmt.format(metrics[key]) if key in metrics else "n/a"
            if key == "val/z/active_dims" and key in metrics:
                cell += f" / {dims[method]}"
            cells.append(cell)
            if majority is not None and title == SHARE_AFTER:
                drawn = majority.get(method)
                cells.append("n/a" if drawn is None else SHARE_FORMAT.format(drawn.mean))
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def row_shares(majority: dict[str, RowMajority | None]) -> str:
    """One line per method: its picture's row majority shares in %, top row first, as the
    rows' labels show them (``- CL rows (% of 10 images): 30 40 ...``)."""
    return "\n".join(
        f"- {method} rows (% of {m.images} images): " + " ".join(f"{100 * s:.0f}" for s in m.shares)
        for method, m in majority.items()
        if m is not None
    )


def _cells(row: str) -> list[str]:
    """The stripped cells of a markdown table row ``| a | b |``."""
    return [cell.strip() for cell in row.strip().strip("|").split("|")]


def caption(text: str) -> str:
    """The picture caption's figures, regenerated from a demo table.

    Args:
        text: Markdown holding a table as [`table`][ncl_lightning.demo.table] writes it
            with its majority-share column (``results.md``, or a page that copies it, such
            as the README).

    Returns:
        ``"mean majority share of the 10 rows: CL 40%, NCL 72%, BayesNCL 70%"``: the
        column's cells as written, in the table's row order.

    Raises:
        DataError: ``text`` has no table with a majority-share column.
    """
    lines = [line.strip() for line in text.splitlines()]
    for i, line in enumerate(lines[:-1]):
        if not line.startswith("| method |") or not lines[i + 1].startswith("|---"):
            continue
        matches = [_SHARE_HEADER.match(head) for head in _cells(line)]
        column = next((j for j, m in enumerate(matches) if m), None)
        if column is None:
            continue
        figures = []
        for row in lines[i + 2 :]:
            if not row.startswith("|"):
                break
            cells = _cells(row)
            figures.append(f"{cells[0]} {cells[column]}")
        count = matches[column].group(1)
        rows = f"the {count} rows" if count else "the drawn rows"
        return f"mean majority share of {rows}: " + ", ".join(figures)
    raise DataError(
        "no demo table with a 'majority share (...)' column found; expected a table as "
        "`python -m ncl_lightning.demo` writes to results.md"
    )


def main(argv: list[str] | None = None) -> str:
    """Run the comparison; unrecognised arguments go to every ``ncl-cli fit`` call."""
    parser = ToolArgumentParser(prog=PROG, description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("runs/demo"), help="run directory")
    parser.add_argument(
        "--configs",
        nargs="+",
        default=DEFAULT,
        help="configs to compare: files, or packaged names (default: %(default)s)",
    )
    parser.add_argument(
        "--no-atlas",
        action="store_true",
        help="skip the feature atlas of the runs' checkpoints (<out>/atlas/index.html)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch CPU threads (default %(default)s: as fast as more for these small "
        "models, and the numbers then do not depend on the machine's core count)",
    )
    args, extra = parser.parse_known_args(argv)  # the rest goes to every `ncl-cli fit`
    return run_main(PROG, lambda: _compare(args, extra))


def _compare(args: argparse.Namespace, extra: list[str]) -> str:
    check_at_least("--threads", args.threads, 1)
    check_output_dir("--out", args.out)
    args.configs = [config_file(c) for c in args.configs]
    torch.set_num_threads(args.threads)
    results, dims, pics, logs, majority = {}, {}, {}, {}, {}
    start = time.perf_counter()
    runs = run_jobs(
        args.configs,
        lambda config: run(config, args.out, extra),
        lambda config: f"{method_name(config)} ({label(config)})",
        lambda config: None,  # every run afresh
    )
    for config, done in zip(args.configs, runs, strict=True):
        name = method_name(config)
        results[name], pics[name], logs[name], majority[name] = done
        dims[name] = int(
            yaml.safe_load(config.read_text())["model"]["init_args"]["proj_output_dim"]
        )
    minutes = (time.perf_counter() - start) / 60
    configs = ", ".join(label(c) for c in args.configs)
    drawn = majority if any(m is not None for m in majority.values()) else None
    report = table(results, dims, drawn) + "\n\n"
    if drawn is not None:
        report += (
            "Majority share of each row of the top-activation picture, top row first (the "
            "rows' labels):\n\n" + row_shares(majority) + "\n\n"
        )
    report += f"Validation split after the last epoch ({configs}); "
    report += f"{minutes:.1f} min on {torch.get_num_threads()} CPU threads.\n"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.md").write_text(report)
    written = [args.out / "results.md"]
    if all(pics.values()):
        out = args.out / f"top_activations_{'_vs_'.join(n.lower() for n in pics)}.png"
        side_by_side(list(pics.values()), list(pics), out)
        written.append(out)
    if all(logs.values()):
        written.append(plot_curves(list(logs.values()), args.out / "curves.png", list(logs)))
        checkpoints = [log / "checkpoints" / "last.ckpt" for log in logs.values()]
        if not args.no_atlas and all(c.is_file() for c in checkpoints):
            atlas = args.out / "atlas"
            written.append(build_atlas(checkpoints, atlas, args.configs[0], names=list(logs)))
    print("\n" + report + "Written: " + ", ".join(map(str, written)))
    if written[-1].name == "index.html":
        print(f"Feature atlas: {written[-1]} (open it in a browser; no server needed)")
    return report


if __name__ == "__main__":
    main()
