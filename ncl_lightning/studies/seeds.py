"""Seeded comparisons: every row of a study trained with several seeds, as mean ± std.

A study is a list of rows, each a packaged config plus overlays (``configs/...``), or one's
own rows in a study file ([`ncl_lightning.studies.study_file`][]). Each ``(row, seed)``
cell is one ``ncl-cli fit`` subprocess (its command line in
``<out>/runs/<row>/seed_<s>/command.txt``)::

    python -m ncl_lightning.studies.seeds demo             # CL / NCL / BayesNCL on digits
    python -m ncl_lightning.studies.seeds --list           # every study
    python -m ncl_lightning.studies.seeds my_study.yaml    # your own rows and configs

writes ``<out>/results.json`` (the final validation metrics of every cell), ``table.md``
(mean ± std over seeds, the per-seed values, the differences beyond the spread) and, for
studies with curves, ``curves.png``. A row's ``pretrain`` config is trained first under
``<out>/pretrain/`` with the cell's seed and fine-tuned from. Finished cells are reused, so
an interrupted study resumes; every argument is checked before any cell starts.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path

from ncl_lightning.foundation.errors import RunFailedError
from ncl_lightning.foundation.resources import config_file
from ncl_lightning.plot.metrics_csv import read_metrics
from ncl_lightning.runtime.errors import ToolArgumentParser, run_main
from ncl_lightning.studies.checks import check_seeds_study
from ncl_lightning.studies.jobs import (
    earlier_record,
    fingerprint,
    folder_args,
    forward_stops,
    fresh_attempt,
    run_child,
    run_jobs,
    slug,
    write_record,
)
from ncl_lightning.studies.spread import beyond_spread, mean_std
from ncl_lightning.studies.study_defs import COLUMNS, STUDIES, Study
from ncl_lightning.studies.study_file import chosen_study

PROG = "python -m ncl_lightning.studies.seeds"


PRETRAINED = "--model.init_args.pretrained"


@dataclass(frozen=True)
class Cell:
    """One ``(row, seed)`` run of a study; ``pretrain``: the run whose checkpoint it starts
    from, run before it."""

    row: str
    seed: int
    command: list[str] = field(compare=False)
    root: Path = field(compare=False)
    pretrain: Cell | None = field(default=None, compare=False)

    @property
    def result_file(self) -> Path:
        return self.root / "result.json"

    @property
    def fingerprint(self) -> str:
        """What makes its result (the study's folder is two above ``root``)."""
        return fingerprint(self.command[1:], self.root.parents[2])

    @property
    def checkpoint(self) -> Path:
        return self.root / "logs" / "version_0" / "checkpoints" / "last.ckpt"


def _fit(
    configs: Sequence[str],
    args: Sequence[str],
    seed: int,
    study: Study,
    root: Path,
    extra: Sequence[str],
) -> list[str]:
    """The ``ncl-cli fit`` command of one run: configs, row values, seed, folder, extras."""
    command = [sys.executable, "-m", "ncl_lightning.entry", "fit"]
    command += [a for c in configs for a in ("--config", str(config_file(c)))]
    command += [*args, "--seed_everything", str(seed)]
    command += [a for key in study.seed_keys for a in (key, str(seed))]
    return [*command, *folder_args(root, logs=True), *extra]


def pretrain_cell(config: str, seed: int, study: Study, out: Path, extra: Sequence[str]) -> Cell:
    """The run of a row's ``pretrain`` config with ``seed``, in ``<out>/pretrain/``."""
    root = out / "pretrain" / slug(config.removesuffix(".yaml")) / f"seed_{seed}"
    return Cell(f"pretrain {config}", seed, _fit([config], (), seed, study, root, extra), root)


def cells_of(study: Study, seeds: Sequence[int], out: Path, extra: Sequence[str]) -> list[Cell]:
    """The ``ncl-cli fit`` command of every ``(row, seed)`` of ``study`` (a row with a
    ``pretrain`` config: starting from the ``last.ckpt`` of its run with the same seed)."""
    cells = []
    for row in study.rows:
        for seed in seeds:
            root = out / "runs" / slug(row.name) / f"seed_{seed}"
            first = pretrain_cell(row.pretrain, seed, study, out, extra) if row.pretrain else None
            args = [PRETRAINED, str(first.checkpoint)] if first else []
            configs = [row.config, *row.overlays]
            command = _fit(configs, [*args, *row.args], seed, study, root, extra)
            cells.append(Cell(row.name, seed, command, root, first))
    return cells


def final_metrics(metrics_csv: Path) -> dict[str, float]:
    """The last logged value of every ``val/`` metric of one run's ``metrics.csv``."""
    series = read_metrics(metrics_csv)
    return {k: points[-1].value for k, points in series.items() if k.startswith("val/")}


def curve(metrics_csv: Path, key: str) -> dict[str, list[float]]:
    """``epoch`` and ``value`` of every logged point of ``key`` (empty when never logged)."""
    points = read_metrics(metrics_csv).get(key, [])
    return {
        "epoch": [float(p.epoch) + 1 if p.epoch is not None else float(p.step) for p in points],
        "value": [p.value for p in points],
    }


def pasteable(command: Sequence[str], env: dict[str, str]) -> str:
    """A cell's command as a shell line to paste where ``ncl-cli`` is installed:
    ``OMP_NUM_THREADS=1 WANDB_MODE=offline ncl-cli fit --config ...``, each word quoted
    as the shell needs (``command`` runs ``python -m ncl_lightning.entry``, ``ncl-cli``)."""
    words = [f"{k}={v}" for k, v in env.items()] + ["ncl-cli", *command[3:]]
    return shlex.join(words)


def run_cell(cell: Cell, study: Study, threads: int) -> dict:
    """Run one cell; returns its record."""
    cell.root.mkdir(parents=True, exist_ok=True)
    fresh_attempt(cell.root)
    env = {"OMP_NUM_THREADS": str(threads), "WANDB_MODE": "offline"}
    (cell.root / "command.txt").write_text(pasteable(cell.command, env) + "\n")
    env = {**os.environ, **env}
    start = time.perf_counter()
    with (cell.root / "fit.log").open("w") as log:
        code = run_child(cell.command, log, env)
    if code != 0:  # the log's last line: ``ncl-cli: error: ...`` for bad input
        lines = (cell.root / "fit.log").read_text(errors="replace").strip().splitlines()
        last = lines[-1].strip()[:300] if lines else ""
        raise RunFailedError(
            f"{cell.row} seed {cell.seed} failed (exit {code})"
            + (f": {last}" if last else "")
            + f"; see {cell.root / 'fit.log'}"
        )
    metrics_csv = cell.root / "logs" / "version_0" / "metrics.csv"
    record = {
        "row": cell.row,
        "seed": cell.seed,
        "seconds": round(time.perf_counter() - start, 1),
        "metrics": final_metrics(metrics_csv),
        "curves": {key: curve(metrics_csv, key) for key in study.curves},
        "checkpoint": str(cell.checkpoint),
    }
    if cell.pretrain is not None:
        record["pretrained"] = str(cell.pretrain.checkpoint)
    record["fingerprint"] = cell.fingerprint
    write_record(cell.result_file, record)
    return record


def run_cells(cells: Sequence[Cell], study: Study, workers: int, threads: int) -> list[dict]:
    """Every cell, ``workers`` at a time (each a subprocess), with a progress line per cell
    ([`run_jobs`][ncl_lightning.studies.jobs.run_jobs]); first the ``pretrain`` runs they
    start from (each once, reused when finished before)."""
    first = list(dict.fromkeys(c.pretrain for c in cells if c.pretrain is not None))
    for jobs in (first, cells) if first else (cells,):
        records = run_jobs(
            jobs,
            lambda cell: run_cell(cell, study, threads),
            lambda cell: f"{cell.row} seed {cell.seed}",
            lambda cell: earlier_record(cell.result_file, cell.fingerprint),
            workers=workers,
            pool=ThreadPoolExecutor,
            ended=lambda cell, record: f"{cell.row} seed {cell.seed} ({record['seconds']:.0f} s)",
        )
    return records


def finished(study: Study, out: Path) -> list[dict]:
    """The records of every finished cell of ``study`` in ``out``, by row, then seed."""
    order = {row.name: i for i, row in enumerate(study.rows)}
    found = [json.loads(p.read_text()) for p in (out / "runs").glob("*/seed_*/result.json")]
    return sorted(
        (r for r in found if r["row"] in order), key=lambda r: (order[r["row"]], r["seed"])
    )


def summary(records: Sequence[dict], study: Study) -> dict[str, dict[str, list[float]]]:
    """Row -> metric key -> the per-seed values (seeds in order), for the study's columns."""
    table: dict[str, dict[str, list[float]]] = {}
    for row in study.rows:
        rows = sorted((r for r in records if r["row"] == row.name), key=lambda r: r["seed"])
        table[row.name] = {
            key: [r["metrics"][key] for r in rows if key in r["metrics"]] for key in study.columns
        }
    return table


def exceeding(values: dict[str, dict[str, list[float]]], study: Study) -> list[str]:
    """One line per metric and pair of rows whose mean ± std intervals do not overlap (and
    whose means differ at the column's shown precision).

    With a ``baseline`` row, only the pairs (baseline, other row) are compared.
    """
    names = list(values)
    if study.baseline:
        pairs = [(study.baseline, n) for n in names if n != study.baseline]
    else:
        pairs = list(combinations(names, 2))
    lines = []
    for key in study.columns:
        column = COLUMNS[key]
        for a, b in pairs:
            if line := beyond_spread(a, values[a][key], b, values[b][key], column.format):
                lines.append(f"{column.title}: {line}")
    return lines


def report(records: Sequence[dict], study: Study) -> str:
    """Markdown: the mean ± std table, the per-seed values, and what exceeds the spread."""
    values = summary(records, study)
    seeds = sorted({r["seed"] for r in records})
    heads = [COLUMNS[k].title for k in study.columns]
    if study.paper:
        heads.append(study.paper_title)
    lines = [
        "| row | seeds | " + " | ".join(heads) + " |",
        "|---" * (len(heads) + 2) + "|",
    ]
    for name, by_key in values.items():
        cells = []
        for key in study.columns:
            seq, column = by_key[key], COLUMNS[key]
            if not seq:
                cells.append("n/a")
                continue
            mean, std = mean_std(seq)  # one seed: its value, no spread to show
            if mean != mean:  # NaN: undefined on a seed (see the per-seed values)
                cells.append("undefined")
                continue
            cells.append(column.format(mean) + (f" ± {column.format(std)}" if len(seq) > 1 else ""))
        if study.paper:
            cells.append(study.paper.get(name, "not reported"))
        n = max((len(v) for v in by_key.values()), default=0)
        lines.append(f"| {name} | {n} | " + " | ".join(cells) + " |")
    lines += ["", f"Per seed ({' / '.join(map(str, seeds))}):", ""]
    for key in study.columns:
        column = COLUMNS[key]
        per_row = [
            f"{name} {' / '.join(column.format(v) for v in by_key[key])}"
            for name, by_key in values.items()
            if by_key[key]
        ]
        if per_row:
            lines.append(f"- {column.title}: " + "; ".join(per_row))
    beyond = exceeding(values, study)
    lines += ["", "Differences that exceed the spread (mean ± std intervals apart):", ""]
    lines += [f"- {line}" for line in beyond] or ["- none"]
    minutes = [r["seconds"] / 60 for r in records]
    lines += ["", f"{len(records)} runs, {min(minutes):.1f}-{max(minutes):.1f} min each."]
    return "\n".join(lines) + "\n"


def plot_curves(records: Sequence[dict], study: Study, path: Path) -> Path | None:
    """One panel per curve key: mean ± std over seeds of each row against the epoch."""
    if not study.curves:
        return None
    from ncl_lightning.plot.curves import mean_std_curves  # matplotlib: only when drawn

    panels: dict[str, dict] = {key: {} for key in study.curves}
    for key, row in ((key, row) for key in study.curves for row in study.rows):
        runs = [r["curves"][key] for r in records if r["row"] == row.name]
        if runs := [(c["epoch"], c["value"]) for c in runs if c["value"]]:
            panels[key][f"{row.name} ({len(runs)} seeds)"] = runs
    return mean_std_curves(panels, path, "epoch")


def run_study(
    name: str | Study,
    out: Path | None = None,
    seeds: Sequence[int] = (0, 1, 2),
    workers: int = 1,
    threads: int = 1,
    extra: Sequence[str] = (),
    rows: Sequence[str] | None = None,
) -> str:
    """Run the cells of a study (a registered name, or a [`Study`][]) and write its
    results to ``out`` (default ``runs/studies/<name>``); returns the report.

    ``rows`` runs only those rows. The table, curves and pictures cover every cell
    finished in ``out`` (so a study can be completed by several calls, e.g. more seeds of
    some rows).
    """
    study = name if isinstance(name, Study) else STUDIES.get(name, config_key="study")()
    out = out or Path("runs/studies") / (name if isinstance(name, str) else slug(study.title))
    check_seeds_study(study, out, seeds, workers, threads, extra, rows)
    out.mkdir(parents=True, exist_ok=True)
    cells = [c for c in cells_of(study, seeds, out, extra) if rows is None or c.row in rows]
    with forward_stops():  # a stop signal to the study stops its running cells too
        run_cells(cells, study, workers, threads)
    records = finished(study, out)
    (out / "results.json").write_text(json.dumps(records))
    text = f"## {study.title}\n\n{report(records, study)}"
    (out / "table.md").write_text(text)
    written = [out / "table.md"]
    if (curves := plot_curves(records, study, out / "curves.png")) is not None:
        written.append(curves)
    if study.after is not None:
        written += study.after(records, out)
    print(text + "\nWritten: " + ", ".join(map(str, written)))
    return text


def main(argv: Sequence[str] | None = None) -> None:
    """The command line: one line and exit status 2 for a bad argument (before any cell
    starts), 1 for a cell that failed (finished cells are kept; a rerun resumes)."""
    parser = ToolArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "study", nargs="?", help="the study to run (--list shows them), or a study file (.yaml)"
    )
    parser.add_argument(
        "--study-file", type=Path, default=None, help="a YAML study of your own rows and configs"
    )
    parser.add_argument("--list", action="store_true", help="list the studies and exit")
    parser.add_argument("--out", type=Path, default=None, help="default: runs/studies/<study>")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--workers", type=int, default=1, help="cells run at once")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per cell")
    parser.add_argument(
        "--run-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra ncl-cli argument for every cell (repeat: --run-arg=--trainer.max_epochs=2)",
    )
    parser.add_argument("--rows", nargs="+", default=None, help="run only these rows")
    args = parser.parse_args(argv)
    if args.list or not (args.study or args.study_file):
        for key in STUDIES.names:
            study = STUDIES.get(key)()
            print(f"{key:18s} {study.title} ({len(study.rows)} rows)")
        return

    def work() -> str:
        study, out = chosen_study(args.study, args.study_file, args.out)
        extra, rows = args.run_arg, args.rows
        return run_study(study, out, args.seeds, args.workers, args.threads, extra, rows)

    run_main(PROG, work)


if __name__ == "__main__":
    main()
