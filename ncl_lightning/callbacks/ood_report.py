"""``OODReport``: one table of a classifier's accuracy on the OOD test sets.

Made for ``ImageNetOODDataModule``: the classifier logs ``test/<name>/<metric>`` for each
of the DataModule's ``test_names`` (``"stylized"``, ``"sketch"``,
``"imagenet_c/<corruption>/<severity>"``); at the end of the test the callback gathers
them into a markdown table (``<run dir>/ood_results.md``) and its JSON twin with the raw
numbers (``ood_results.json``).
"""

from __future__ import annotations

import json
from pathlib import Path
from statistics import fmean
from typing import Any

import lightning as L
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn

from ncl_lightning.callbacks.schedule import run_dir
from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.foundation.protocols import MultipleTestSets

IMAGENET_C = "imagenet_c"


def _pct(value: float | None) -> str:
    return "" if value is None else f"{100 * value:.2f}"


def _split_imagenet_c(
    values: dict[str, float],
) -> tuple[dict[str, float], dict[str, dict[int, float]]]:
    """Split ``values`` into other sets and ImageNet-C ``{corruption: {severity: value}}``."""
    others: dict[str, float] = {}
    grid: dict[str, dict[int, float]] = {}
    for name, value in values.items():
        parts = name.split("/")
        if len(parts) == 3 and parts[0] == IMAGENET_C and parts[2].isdigit():
            grid.setdefault(parts[1], {})[int(parts[2])] = float(value)
        else:
            others[name] = float(value)
    return others, grid


def ood_table(values: dict[str, float], metric: str = "acc_top1") -> tuple[str, dict[str, Any]]:
    """Markdown table and JSON-able summary of OOD accuracies.

    Rows: each non-ImageNet-C set (``stylized``, ``sketch``, ... in the given order), then
    ``imagenet_c (mean)``, the mean over every corruption x severity entry (its severity
    columns: the mean over corruptions at that severity), then one row
    ``imagenet_c/<corruption>`` per corruption with its value at each severity and its
    mean over severities. Values are printed as percentages with 2 decimals.

    Args:
        values: Accuracy in [0, 1] per test-set name (``"stylized"``, ``"sketch"``,
            ``"imagenet_c/<corruption>/<severity>"``).
        metric: Name of the metric, for the table header.

    Returns:
        ``(markdown, summary)``; ``summary`` holds the raw fractions: ``{"metric": ...,
        "sets": {"<set>": value, ...}, "imagenet_c": {"mean": m, "severity_mean": {"1":
        ...}, "corruptions": {"<corruption>": {"mean": m, "severities": {"1": ...}}}}}``
        (the ``imagenet_c`` entry only when ImageNet-C values are given).
    """
    others, grid = _split_imagenet_c(values)
    severities = sorted({s for by_sev in grid.values() for s in by_sev})
    header = [f"set ({metric}, %)", "mean", *(f"severity {s}" for s in severities)]
    rows = [[name, _pct(v), *("" for _ in severities)] for name, v in others.items()]
    summary: dict[str, Any] = {"metric": metric, "sets": dict(others)}
    if grid:
        all_values = [v for by_sev in grid.values() for v in by_sev.values()]
        sev_mean = {
            s: fmean([by_sev[s] for by_sev in grid.values() if s in by_sev]) for s in severities
        }
        rows.append([f"{IMAGENET_C} (mean)", _pct(fmean(all_values))])
        rows[-1] += [_pct(sev_mean[s]) for s in severities]
        corruptions: dict[str, Any] = {}
        for name, by_sev in grid.items():
            mean = fmean(by_sev.values())
            rows.append([f"{IMAGENET_C}/{name}", _pct(mean)])
            rows[-1] += [_pct(by_sev.get(s)) for s in severities]
            severities_json = {str(s): by_sev[s] for s in sorted(by_sev)}
            corruptions[name] = {"mean": mean, "severities": severities_json}
        summary[IMAGENET_C] = {
            "mean": fmean(all_values),
            "severity_mean": {str(s): m for s, m in sev_mean.items()},
            "corruptions": corruptions,
        }
    lines = [header, ["---", *("---:" for _ in header[1:])], *rows]
    markdown = "\n".join("| " + " | ".join(cells) + " |" for cells in lines) + "\n"
    return markdown, summary


class OODReport(L.Callback):
    """Write the OOD accuracy table at the end of ``trainer.test``.

    Reads ``trainer.callback_metrics["test/<name>/<metric>"]`` for each name of
    ``trainer.datamodule.test_names`` (does nothing when the DataModule has none), builds
    [`ood_table`][], logs it and, on rank 0, writes ``<run dir>/<filename>`` (markdown)
    and the JSON twin (same stem, ``.json``).

    Args:
        filename: Markdown file name inside the run folder.
        metric: Metric logged per set by the classifier (``acc_top1``, ``acc_top5``).

    Attributes:
        last_summary: The JSON-able summary of the last test (``None`` before).
        last_paths: ``{"markdown": path, "json": path}`` written by the last test.
    """

    def __init__(self, filename: str = "ood_results.md", metric: str = "acc_top1") -> None:
        if not filename or Path(filename).suffix == ".json" or Path(filename).name != filename:
            raise ConfigError(
                f"OODReport filename must be a plain file name not ending in .json, "
                f"got {filename!r}",
                key="filename",
            )
        if not metric:
            raise ConfigError("OODReport metric must be a non-empty metric name", key="metric")
        self.filename = filename
        self.metric = metric
        self.last_summary: dict[str, Any] | None = None
        self.last_paths: dict[str, Path] = {}

    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        datamodule = trainer.datamodule
        names = list(datamodule.test_names) if isinstance(datamodule, MultipleTestSets) else []
        if not names:
            return
        folder = run_dir(trainer)  # on every rank: a collective under DDP
        metrics = trainer.callback_metrics
        keys = {name: f"test/{name}/{self.metric}" for name in names}
        values = {name: float(metrics[key]) for name, key in keys.items() if key in metrics}
        missing = [keys[name] for name in names if name not in values]
        if missing:
            rank_zero_warn(f"OODReport: metrics not logged, left out of the table: {missing}")
        if not values:
            return
        markdown, summary = ood_table(values, self.metric)
        self.last_summary = summary
        rank_zero_info(f"OOD results ({self.metric}):\n{markdown}")
        if not trainer.is_global_zero:
            return
        folder.mkdir(parents=True, exist_ok=True)
        md_path = folder / self.filename
        json_path = md_path.with_suffix(".json")
        md_path.write_text(markdown, encoding="utf-8")
        json_path.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
        self.last_paths = {"markdown": md_path, "json": json_path}
