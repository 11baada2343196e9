"""The evaluation chain over several seeds (``chain --seeds``): mean ± std of every cell.

Writes ``<out>/results.md`` (the one-seed table's columns as ``mean ± std`` over the seeds
that have a value, the per-seed values and the differences beyond the spread, between runs
and, with ``--spaces h z p``, between a run's ``h`` probes and its ``z`` or ``p`` ones),
``results_seeds.json`` (``{seed: {config stem: results}}``) and the mean ``accuracy_vs_k.png``.
"""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Mapping, Sequence
from itertools import combinations
from pathlib import Path

from ncl_lightning.plot.pictures import accuracy_vs_k
from ncl_lightning.studies.chain_table import (
    COLUMNS,
    cell_values,
    markdown,
    selection_curves,
    selection_points,
)
from ncl_lightning.studies.spread import beyond_spread, mean_std

Results = dict[str, dict[str, dict[str, float]]]  # config stem -> protocol -> metrics


def aggregate(per_seed: Mapping[int, Results]) -> dict[str, dict[str, dict[int, float]]]:
    """Run -> column -> {seed: value} in the table's units, for every column of any seed.

    A column a run lacks in some seeds holds only the seeds that have it; one no seed has
    stays an empty dict.
    """
    table: dict[str, dict[str, dict[int, float]]] = {}
    for seed, runs in per_seed.items():
        for name, results in runs.items():
            row = table.setdefault(name, {})
            for column, value in cell_values(results).items():
                cells = row.setdefault(column, {})
                if value is not None:
                    cells[seed] = value
    columns = sorted(  # in the one-seed table's order, whichever run has them first
        dict.fromkeys(c for row in table.values() for c in row),
        key=lambda c: (list(COLUMNS).index(re.sub(r"^(\w+)@\d+ ", r"\1@k ", c)), "@k" in c),
    )
    return {name: {c: row.get(c, {}) for c in columns} for name, row in table.items()}


def _pm(values: Sequence[float]) -> str:
    mean, std = mean_std(values)
    return f"{mean:.1f} ± {std:.1f}"


def combined_rows(
    table: Mapping[str, Mapping[str, Mapping[int, float]]],
) -> dict[str, dict[str, str]]:
    """The table's cells: ``mean ± std`` (one decimal), empty where no seed has a value."""
    return {
        name: {c: _pm(list(v.values())) if v else "" for c, v in row.items()}
        for name, row in table.items()
    }


def exceeding(table: Mapping[str, Mapping[str, Mapping[int, float]]]) -> list[str]:
    """One line per column and pair of runs whose ``mean ± std`` intervals do not overlap
    (and whose means differ at the table's precision, one decimal)."""
    columns = list(dict.fromkeys(c for row in table.values() for c in row))
    lines = []
    for column in columns:
        for a, b in combinations(table, 2):
            va = list(table[a].get(column, {}).values())
            vb = list(table[b].get(column, {}).values())
            if line := beyond_spread(a, va, b, vb, "{:.1f}".format):
                lines.append(f"{column}: {line}")
    return lines


def _h_column(column: str) -> tuple[str, str] | None:
    """The space of a ``z`` or ``p`` column and the ``h`` column it pairs with
    (``z linear top-1`` -> ``("z", "linear top-1")``), or ``None``."""
    space, _, h_column = column.partition(" ")
    return (space, h_column) if space in ("z", "p") and h_column in COLUMNS else None


def exceeding_spaces(table: Mapping[str, Mapping[str, Mapping[int, float]]]) -> list[str]:
    """Within each run, every ``z`` or ``p`` column (``z linear top-1``, ...; chain
    ``--spaces h z p``) against its ``h`` column where their ``mean ± std`` intervals do
    not overlap."""
    lines = []
    for name, row in table.items():
        for column in row:
            paired = _h_column(column)
            if paired is None or paired[1] not in row:
                continue
            space, h_column = paired
            vh, vs = list(row[h_column].values()), list(row[column].values())
            if line := beyond_spread("h", vh, space, vs, "{:.1f}".format):
                lines.append(f"{h_column}: {name} {line}")
    return lines


def report(table: Mapping[str, Mapping[str, Mapping[int, float]]], seeds: Sequence[int]) -> str:
    """Markdown: the ``mean ± std`` table, the per-seed values, the differences beyond spread
    (between runs; with ``z`` columns, also between a run's ``h`` and ``z``)."""
    lines = [markdown(combined_rows(table)), "", f"Per seed ({' / '.join(map(str, seeds))}):", ""]
    columns = list(dict.fromkeys(c for row in table.values() for c in row))
    for column in columns:
        per_run = [
            f"{name} "
            + " / ".join(f"{row[column][s]:.1f}" if s in row[column] else "–" for s in seeds)
            for name, row in table.items()
            if row.get(column)
        ]
        if per_run:
            lines.append(f"- {column}: " + "; ".join(per_run))
    lines += ["", "Differences that exceed the spread (mean ± std intervals apart):", ""]
    lines += [f"- {line}" for line in exceeding(table)] or ["- none"]
    measured = (c for row in table.values() for c, v in row.items() if v)
    if any(_h_column(c) for c in measured):
        lines += ["", "Within a run, h against z or p, beyond the spread:", ""]
        lines += [f"- {line}" for line in exceeding_spaces(table)] or ["- none"]
    return "\n".join(lines) + "\n"


def mean_curves(per_seed: Mapping[int, Results]) -> dict[str, tuple[list[int], list[float]]]:
    """Linear accuracy against k of every run and rule, at each k the mean over seeds."""
    points: dict[str, dict[int, list[float]]] = {}
    for runs in per_seed.values():
        for name, (ks, accs) in selection_curves(runs).items():
            for k, acc in zip(ks, accs, strict=True):
                points.setdefault(name, {}).setdefault(k, []).append(acc)
    return {
        name: (sorted(by_k), [statistics.fmean(by_k[k]) for k in sorted(by_k)])
        for name, by_k in points.items()
    }


def sweep_table(per_seed: Mapping[int, Results]) -> str:
    """Markdown: for every run and rule, each k's linear accuracy / retrieval P@10 (%) as
    ``mean ± std`` over the seeds (the one-seed chain's sweep over k, NCL paper Fig. 10)."""
    cells: dict[tuple[str, str], dict[int, dict[str, list[float]]]] = {}
    for runs in per_seed.values():
        for name, results in runs.items():
            for (rule, k), metrics in selection_points(results).items():
                by_k = cells.setdefault((name, rule), {}).setdefault(k, {})
                for metric, value in metrics.items():
                    by_k.setdefault(metric, []).append(100 * value)
    if not cells:
        return ""
    ks = sorted({k for by_k in cells.values() for k in by_k})
    lines = ["| run | rule | " + " | ".join(f"k = {k}" for k in ks) + " |"]
    lines.append("|---|---|" + "---|" * len(ks))
    for (name, rule), by_k in cells.items():
        row = []
        for k in ks:
            got = by_k.get(k, {})
            row.append(
                " / ".join(_pm(got[m]) for m in ("linear_acc", "retrieval_p@10") if m in got)
            )
        lines.append(f"| {name} | {rule} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def write_combined(per_seed: Mapping[int, Results], out: Path) -> str:
    """Write ``results_seeds.json``, ``results.md`` (and the curves) into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "results_seeds.json").write_text(
        json.dumps({str(s): r for s, r in per_seed.items()}, indent=2)
    )
    text = report(aggregate(per_seed), list(per_seed))
    if sweep := sweep_table(per_seed):
        text += "\nThe sweep over k (linear accuracy / retrieval precision@10, %):\n\n"
        text += sweep + "\n"
    (out / "results.md").write_text(text)
    curves = mean_curves(per_seed)
    if curves:
        title = f"Linear accuracy vs selected dims (mean of {len(per_seed)} seeds)"
        accuracy_vs_k(curves, out / "accuracy_vs_k.png", title)
    return text
