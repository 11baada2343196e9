"""The evaluation chain's table: one row of cells per run, the columns they fill.

[`ncl_lightning.studies.chain`][] writes one chain's table with it and
[`ncl_lightning.studies.chain_seeds`][] the mean ± std over seeds.
"""

from __future__ import annotations

import re

# Column -> (protocol, metric key); selection keys get the reported k filled in. The
# "linear" and "fine-tune" columns read the probes on h, the "z ..." ones the probes on the
# projector output z and the "p ..." ones those on the raw projector output p (chain
# --spaces h z p; NCL paper, Table 7).
COLUMNS: dict[str, tuple[str, str]] = {
    "online linear": ("pretrain", "val/online_acc"),
    "z sparsity": ("pretrain", "val/z/sparsity"),
    "z consistency": ("pretrain", "val/z/semantic_consistency"),
    "linear top-1": ("linear", "val/offline_linear/acc_top1"),
    "linear top-5": ("linear", "val/offline_linear/acc_top5"),
    "z linear top-1": ("linear_z", "val/offline_linear_z/acc_top1"),
    "z linear top-5": ("linear_z", "val/offline_linear_z/acc_top5"),
    "p linear top-1": ("linear_p", "val/offline_linear_p/acc_top1"),
    "p linear top-5": ("linear_p", "val/offline_linear_p/acc_top5"),
    "kNN top-1": ("knn", "test/offline_knn/acc_top1"),
    "fine-tune top-1": ("finetune", "val/offline_finetune/acc_top1"),
    "z fine-tune top-1": ("finetune_z", "val/offline_finetune_z/acc_top1"),
    "p fine-tune top-1": ("finetune_p", "val/offline_finetune_p/acc_top1"),
    "EA@k linear": ("selection", "test/selection/ea/k{k}/linear_acc"),
    "random@k linear": ("selection", "test/selection/random/k{k}/linear_acc"),
    "EA@k P@10": ("selection", "test/selection/ea/k{k}/retrieval_p@10"),
    "random@k P@10": ("selection", "test/selection/random/k{k}/retrieval_p@10"),
    "supervised top-1": ("supervised", "val/classifier/acc_top1"),
}
# Scaled x100 in the table except these (already on a 0-100 scale).
UNSCALED = {"z consistency"}


SELECTION_KEY = re.compile(r"^test/selection/(\w+)/k(\d+)/(.+)$")


def selection_points(results: dict[str, dict[str, float]]) -> dict[tuple[str, int], dict]:
    """``(rule, k)`` -> metric -> value of one run's ``test/selection/{rule}/k{k}/{metric}``
    keys, by rule and k."""
    points: dict[tuple[str, int], dict[str, float]] = {}
    for key, value in results.get("selection", {}).items():
        if found := SELECTION_KEY.match(key):
            points.setdefault((found[1], int(found[2])), {})[found[3]] = value
    return dict(sorted(points.items()))


def cell_values(results: dict[str, dict[str, float]]) -> dict[str, float | None]:
    """One run's table values by column (×100 except z consistency; None where missing)."""
    # the reported k: the largest swept k below d (the paper keeps 256 of 512)
    ks = [k for rule, k in selection_points(results) if rule == "ea"]
    k = ks[-2] if len(ks) > 1 else (ks[0] if ks else None)
    cells = {}
    for column, (protocol, key) in COLUMNS.items():
        value = results.get(protocol, {}).get(key.format(k=k))
        scale = 1 if column in UNSCALED else 100
        name = column.replace("@k", f"@{k}") if k else column
        cells[name] = None if value is None else scale * value
    return cells


def table_row(results: dict[str, dict[str, float]]) -> dict[str, str]:
    """Format one run's results as the table's cells (percentages, 1 decimal)."""
    return {c: "" if v is None else f"{v:.1f}" for c, v in cell_values(results).items()}


def selection_curves(
    all_results: dict[str, dict[str, dict[str, float]]],
) -> dict[str, tuple[list[int], list[float]]]:
    """Linear accuracy against k for every run and rule (NCL paper, Figure 10)."""
    curves: dict[str, tuple[list[int], list[float]]] = {}
    for name, results in all_results.items():
        for (rule, k), metrics in selection_points(results).items():
            if rule in ("ea", "random") and "linear_acc" in metrics:
                ks, accs = curves.setdefault(f"{name} {rule}", ([], []))
                ks.append(k)
                accs.append(metrics["linear_acc"])
    return curves


def markdown(rows: dict[str, dict[str, str]]) -> str:
    """Rows with at least one value, columns with at least one value."""
    columns = [c for c in dict.fromkeys(c for r in rows.values() for c in r)
               if any(r.get(c) for r in rows.values())]  # fmt: skip
    lines = ["| run | " + " | ".join(columns) + " |", "|---|" + "---|" * len(columns)]
    lines += [f"| {name} | " + " | ".join(r.get(c, "") for c in columns) + " |"
              for name, r in rows.items()]  # fmt: skip
    return "\n".join(lines)
