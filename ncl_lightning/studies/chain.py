"""The whole evaluation chain through ``ncl-cli``, for one table of results.

For each pre-training config: ``fit`` it, then on its ``last.ckpt`` run the offline
linear probe (``fit``), the kNN classifier (``test``), feature selection (``test``) and
fine-tuning (``fit``), each from its own config; supervised CE/NCE configs are trained
too. Prints (and writes) one markdown table::

    python -m ncl_lightning.studies.chain \\
        --pretrain configs/subset/cifar10_subset_cl.yaml configs/subset/cifar10_subset_ncl.yaml \\
        --linear configs/eval/cifar10_subset_linear.yaml \\
        --knn configs/eval/cifar10_subset_knn.yaml \\
        --selection configs/eval/cifar10_subset_feature_selection.yaml \\
        --finetune configs/eval/cifar10_subset_finetune.yaml \\
        --supervised configs/subset/cifar10_subset_ce.yaml configs/subset/cifar10_subset_nce.yaml \\
        --out runs/eval_subset

Every run is an ordinary ``ncl-cli`` run (its logs and checkpoints are under ``--out``);
``--pretrain-arg`` / ``--eval-arg`` forward extra CLI arguments (e.g. shorter runs). Each
run is announced on stderr (``[run k/N] <config> <protocol> | elapsed ... | ETA ...``);
Lightning's per-run banners, bars, model summaries and test-metric tables are off
unless ``--verbose``.

``--seeds 0 1 2`` runs the whole chain once per seed into ``<out>/seed_<S>/`` (each with its
own resumable ``results.json`` / ``results.md``; ``--seed_everything S`` is appended to every
pre-training and evaluation run's arguments), then writes ``<out>/results.md`` with every
cell as ``mean ± std`` over the seeds, the per-seed values and the differences beyond the
spread, ``<out>/results_seeds.json`` and the mean accuracy-vs-k curves (see
:mod:`ncl_lightning.studies.chain_seeds`). Without ``--seeds`` one chain runs into
``--out`` as before.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.plot.pictures import accuracy_vs_k
from ncl_lightning.runtime.cli import cli_main
from ncl_lightning.runtime.progress import QUIET_TRAINER_ARGS, Progress, quiet_lightning

# Column -> (protocol, metric key); selection keys get the reported k filled in.
COLUMNS: dict[str, tuple[str, str]] = {
    "online linear": ("pretrain", "val/online_acc"),
    "z sparsity": ("pretrain", "val/z/sparsity"),
    "z consistency": ("pretrain", "val/z/semantic_consistency"),
    "linear top-1": ("linear", "val/offline_linear/acc_top1"),
    "linear top-5": ("linear", "val/offline_linear/acc_top5"),
    "kNN top-1": ("knn", "test/offline_knn/acc_top1"),
    "fine-tune top-1": ("finetune", "val/offline_finetune/acc_top1"),
    "EA@k linear": ("selection", "test/selection/ea/k{k}/linear_acc"),
    "random@k linear": ("selection", "test/selection/random/k{k}/linear_acc"),
    "EA@k P@10": ("selection", "test/selection/ea/k{k}/retrieval_p@10"),
    "random@k P@10": ("selection", "test/selection/random/k{k}/retrieval_p@10"),
    "supervised top-1": ("supervised", "val/classifier/acc_top1"),
}
# Scaled x100 in the table except these (already on a 0-100 scale).
UNSCALED = {"z consistency"}


SUBCOMMANDS = {"linear": "fit", "knn": "test", "selection": "test", "finetune": "fit"}


def _run(
    subcommand: str, config: Path, root: Path, extra: Sequence[str], verbose: bool = False
) -> dict[str, float]:
    args = [
        subcommand, "--config", str(config),
        "--trainer.default_root_dir", str(root),
        "--trainer.logger.init_args.save_dir", str(root),
        *(() if verbose else QUIET_TRAINER_ARGS),
        *(("--verbose=false",) if subcommand == "test" and not verbose else ()),
        *extra,
    ]  # fmt: skip
    with quiet_lightning(verbose):
        cli = cli_main(args)
    metrics = {k: float(v) for k, v in cli.trainer.callback_metrics.items() if v.numel() == 1}
    if subcommand == "fit" and cli.trainer.checkpoint_callback is not None:
        metrics["_last_ckpt"] = cli.trainer.checkpoint_callback.last_model_path  # type: ignore[assignment]
    return metrics


def _selection_k(metrics: dict[str, float]) -> int | None:
    """The reported k: the largest swept k below d (the paper keeps 256 of 512)."""
    ks = sorted({int(k.split("/")[3][1:]) for k in metrics if k.startswith("test/selection/ea/")})
    return ks[-2] if len(ks) > 1 else (ks[0] if ks else None)


def run_chain(
    pretrain: Path,
    protocols: dict[str, Path | None],
    out: Path,
    pretrain_args: Sequence[str] = (),
    eval_args: Sequence[str] = (),
    protocol_args: Mapping[str, Sequence[str]] | None = None,
    progress: Progress | None = None,
    verbose: bool = False,
) -> dict[str, dict[str, float]]:
    """Pre-train with ``pretrain`` and evaluate its last checkpoint with each protocol.

    Args:
        pretrain: Pre-training config.
        protocols: ``linear``, ``knn``, ``selection``, ``finetune`` -> config (or None).
        out: Folder for all runs (``<out>/<config stem>/<protocol>``).
        pretrain_args: Extra ``ncl-cli fit`` arguments for pre-training.
        eval_args: Extra arguments for every evaluation run.
        protocol_args: Extra arguments of one protocol's run, by protocol name.
        progress: Where each run is announced (default: a progress of this chain's runs).
        verbose: Keep Lightning's per-run banners, progress bars and model summaries.

    Returns:
        ``{protocol: {metric key: value}}`` including ``pretrain``.
    """
    root = out / pretrain.stem
    own_progress = progress is None
    if progress is None:
        progress = Progress(1 + sum(c is not None for c in protocols.values()), "run")
    with progress.unit(f"{pretrain.stem} pretrain"):
        results = {"pretrain": _run("fit", pretrain, root / "pretrain", pretrain_args, verbose)}
    ckpt = results["pretrain"].pop("_last_ckpt", "")
    if not ckpt or not Path(str(ckpt)).is_file():
        raise ConfigError(
            f"{pretrain} wrote no last.ckpt (ModelCheckpoint save_last?)", key="pretrain"
        )
    for name, config in protocols.items():
        if config is not None:
            own = (protocol_args or {}).get(name, ())
            extra = ["--model.init_args.checkpoint", str(ckpt), *eval_args, *own]
            with progress.unit(f"{pretrain.stem} {name}"):
                results[name] = _run(SUBCOMMANDS[name], config, root / name, extra, verbose)
            results[name].pop("_last_ckpt", None)
    if own_progress:
        progress.finish()
    return results


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


def run_all(
    args: argparse.Namespace,
    out: Path,
    pretrain_args: Sequence[str],
    eval_args: Sequence[str],
) -> dict[str, dict[str, dict[str, float]]]:
    """Every config's chain into ``out`` (resumable), then its table and pictures."""
    protocols = {n: getattr(args, n) for n in ("linear", "knn", "selection", "finetune")}
    out.mkdir(parents=True, exist_ok=True)
    done = out / "results.json"
    # Results are saved after every config; a rerun skips the configs already done.
    all_results: dict[str, dict[str, dict[str, float]]] = (
        json.loads(done.read_text()) if done.is_file() else {}
    )
    n_protocols = sum(c is not None for c in protocols.values())
    runs = {c: 1 + n_protocols for c in args.pretrain}
    runs.update({c: 1 for c in args.supervised})
    progress = Progress(sum(runs.values()), "run")
    for config in [*args.pretrain, *args.supervised]:
        if config.stem in all_results:
            for _ in range(runs[config]):
                progress.skip(config.stem, "done before")
            continue
        if config in args.pretrain:
            result = run_chain(
                config,
                protocols,
                out,
                pretrain_args,
                eval_args,
                progress=progress,
                verbose=args.verbose,
            )
        else:
            with progress.unit(f"{config.stem} supervised"):
                supervised = _run("fit", config, out / config.stem, pretrain_args, args.verbose)
            result = {"supervised": supervised}
            result["supervised"].pop("_last_ckpt", None)
            stats = {k: v for k, v in result["supervised"].items() if k.startswith("val/z/")}
            result["pretrain"] = stats  # representation statistics share the columns
        all_results[config.stem] = result
        done.write_text(json.dumps(all_results, indent=2))
    progress.finish()
    table = markdown({name: table_row(res) for name, res in all_results.items()})
    (out / "results.md").write_text(table + "\n")
    curves = selection_curves(all_results)
    if curves:
        accuracy_vs_k(curves, out / "accuracy_vs_k.png", "Linear accuracy vs selected dims")
    return all_results


def main(argv: Sequence[str] | None = None) -> dict:
    """Run the chain; returns ``{config stem: results}`` (with ``--seeds``: by seed)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pretrain", nargs="*", type=Path, default=[])
    for name in ("linear", "knn", "selection", "finetune"):
        parser.add_argument(f"--{name}", type=Path, default=None)
    parser.add_argument("--supervised", nargs="*", type=Path, default=[])
    parser.add_argument("--out", type=Path, default=Path("runs/eval_chain"))
    parser.add_argument("--pretrain-arg", action="append", default=[], dest="pretrain_args")
    parser.add_argument("--eval-arg", action="append", default=[], dest="eval_args")
    parser.add_argument(
        "--seeds", nargs="+", type=int, default=None, help="one chain per seed, then mean ± std"
    )
    parser.add_argument(
        "--verbose", action="store_true", help="keep Lightning's per-run banners and bars"
    )
    args = parser.parse_args(argv)
    if args.seeds is None:
        all_results = run_all(args, args.out, args.pretrain_args, args.eval_args)
        print((args.out / "results.md").read_text(), end="")
        return all_results
    from ncl_lightning.studies.chain_seeds import write_combined

    per_seed = {}
    for seed in dict.fromkeys(args.seeds):
        seeded = ["--seed_everything", str(seed)]
        per_seed[seed] = run_all(
            args,
            args.out / f"seed_{seed}",
            [*args.pretrain_args, *seeded],
            [*args.eval_args, *seeded],
        )
    print(write_combined(per_seed, args.out), end="")
    return per_seed


if __name__ == "__main__":
    main()
