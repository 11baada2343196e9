"""The evaluation chain's table: one row of cells per run, the columns they fill.

[`ncl_lightning.studies.chain`][] writes one chain's table with it and
[`ncl_lightning.studies.chain_seeds`][] the mean ± std over seeds.
"""

from __future__ import annotations

# Column -> (protocol, metric key); selection keys get the reported k filled in. The
# "linear" and "fine-tune" columns read the probes on h, the "z linear" and "z fine-tune"
# ones the probes on the projector output z (chain --spaces h z; NCL paper, Table 7).
COLUMNS: dict[str, tuple[str, str]] = {
    "online linear": ("pretrain", "val/online_acc"),
    "z sparsity": ("pretrain", "val/z/sparsity"),
    "z consistency": ("pretrain", "val/z/semantic_consistency"),
    "linear top-1": ("linear", "val/offline_linear/acc_top1"),
    "linear top-5": ("linear", "val/offline_linear/acc_top5"),
    "z linear top-1": ("linear_z", "val/offline_linear_z/acc_top1"),
    "z linear top-5": ("linear_z", "val/offline_linear_z/acc_top5"),
    "kNN top-1": ("knn", "test/offline_knn/acc_top1"),
    "fine-tune top-1": ("finetune", "val/offline_finetune/acc_top1"),
    "z fine-tune top-1": ("finetune_z", "val/offline_finetune_z/acc_top1"),
    "EA@k linear": ("selection", "test/selection/ea/k{k}/linear_acc"),
    "random@k linear": ("selection", "test/selection/random/k{k}/linear_acc"),
    "EA@k P@10": ("selection", "test/selection/ea/k{k}/retrieval_p@10"),
    "random@k P@10": ("selection", "test/selection/random/k{k}/retrieval_p@10"),
    "supervised top-1": ("supervised", "val/classifier/acc_top1"),
}
# Scaled x100 in the table except these (already on a 0-100 scale).
UNSCALED = {"z consistency"}


def _selection_k(metrics: dict[str, float]) -> int | None:
    """The reported k: the largest swept k below d (the paper keeps 256 of 512)."""
    ks = sorted({int(k.split("/")[3][1:]) for k in metrics if k.startswith("test/selection/ea/")})
    return ks[-2] if len(ks) > 1 else (ks[0] if ks else None)


def cell_values(results: dict[str, dict[str, float]]) -> dict[str, float | None]:
    """One run's table values by column (×100 except z consistency; None where missing)."""
    k = _selection_k(results.get("selection", {}))
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
    curves = {}
    for name, results in all_results.items():
        selection = results.get("selection", {})
        for rule in ("ea", "random"):
            prefix = f"test/selection/{rule}/k"
            points = sorted(
                (int(key[len(prefix) :].split("/")[0]), value)
                for key, value in selection.items()
                if key.startswith(prefix) and key.endswith("/linear_acc")
            )
            if points:
                curves[f"{name} {rule}"] = ([k for k, _ in points], [v for _, v in points])
    return curves


def markdown(rows: dict[str, dict[str, str]]) -> str:
    """Rows with at least one value, columns with at least one value."""
    columns = [c for c in dict.fromkeys(c for r in rows.values() for c in r)
               if any(r.get(c) for r in rows.values())]  # fmt: skip
    lines = ["| run | " + " | ".join(columns) + " |", "|---|" + "---|" * len(columns)]
    lines += [f"| {name} | " + " | ".join(r.get(c, "") for c in columns) + " |"
              for name, r in rows.items()]  # fmt: skip
    return "\n".join(lines)
