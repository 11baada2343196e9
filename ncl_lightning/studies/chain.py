"""The whole evaluation chain through ``ncl-cli``, for one table of results.

For each pre-training config: ``fit`` it, then on its ``last.ckpt`` run the offline
linear probe (``fit``), the kNN classifier (``test``), feature selection (``test``) and
fine-tuning (``fit``), each from its own config; supervised CE/NCE configs are trained
too. Prints (and writes ``<out>/results.md``) one markdown table; see docs/evaluation.md::

    python -m ncl_lightning.studies.chain \\
        --pretrain configs/subset/cifar10_subset_cl.yaml configs/subset/cifar10_subset_ncl.yaml \\
        --linear configs/eval/cifar10_subset_linear.yaml \\
        --knn configs/eval/cifar10_subset_knn.yaml \\
        --supervised configs/subset/cifar10_subset_ce.yaml --out runs/eval_subset

``--spaces h z p`` runs the linear probe and fine-tuning on the encoder output ``h``, on
the projector output ``z`` and on the raw projector output ``p`` (NCL paper, Table 7);
``--seeds 0 1 2`` runs the chain once per seed into ``<out>/seed_<S>/``, then reports
``mean ± std`` ([`ncl_lightning.studies.chain_seeds`][]).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from ncl_lightning.evaluation.linear import SPACES
from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.foundation.progress import Progress
from ncl_lightning.foundation.resources import config_file
from ncl_lightning.foundation.validation import check_choice, check_output_dir
from ncl_lightning.plot.pictures import accuracy_vs_k
from ncl_lightning.runtime.errors import ToolArgumentParser, run_main
from ncl_lightning.studies.chain_seeds import write_combined
from ncl_lightning.studies.chain_table import markdown, selection_curves, table_row
from ncl_lightning.studies.checks import check_seeds
from ncl_lightning.studies.jobs import cli_here, folder_args, run_jobs

PROG = "python -m ncl_lightning.studies.chain"
SUBCOMMANDS = {"linear": "fit", "knn": "test", "selection": "test", "finetune": "fit"}
SPACED = ("linear", "finetune")
"""Protocols that run once per space of ``--spaces`` (the probes' ``space``)."""


def protocol_runs(
    protocols: Mapping[str, Path | None], spaces: Sequence[str] = ("h",)
) -> list[tuple[str, str, Path, list[str]]]:
    """The evaluation runs of one checkpoint: ``(key, protocol, config, extra args)``.

    ``linear`` and ``finetune`` run once per space: key ``linear`` for ``h`` (the configs'
    own ``space: h``, no extra argument), ``linear_z`` with ``--model.init_args.space z``.
    Other protocols run once, under their own name. ``None`` configs are left out.
    """
    for space in spaces:
        check_choice("spaces", space, SPACES)
    runs = []
    for name, config in protocols.items():
        if config is None:
            continue
        for space in spaces if name in SPACED else ("h",):
            key = name if space == "h" else f"{name}_{space}"
            extra = [] if space == "h" else ["--model.init_args.space", space]
            runs.append((key, name, config, extra))
    return runs


def _run(
    subcommand: str, config: Path, root: Path, extra: Sequence[str], verbose: bool = False
) -> dict[str, float]:
    args = [
        subcommand, "--config", str(config),
        *folder_args(root, verbose=verbose),
        *(("--verbose=false",) if subcommand == "test" and not verbose else ()),
        *extra,
    ]  # fmt: skip
    cli = cli_here(args, verbose)
    metrics = {k: float(v) for k, v in cli.trainer.callback_metrics.items() if v.numel() == 1}
    if subcommand == "fit" and cli.trainer.checkpoint_callback is not None:
        metrics["_last_ckpt"] = cli.trainer.checkpoint_callback.last_model_path  # type: ignore[assignment]
    return metrics


def run_chain(
    pretrain: Path,
    protocols: dict[str, Path | None],
    out: Path,
    pretrain_args: Sequence[str] = (),
    eval_args: Sequence[str] = (),
    protocol_args: Mapping[str, Sequence[str]] | None = None,
    progress: Progress | None = None,
    verbose: bool = False,
    spaces: Sequence[str] = ("h",),
) -> dict[str, dict[str, float]]:
    """Pre-train with ``pretrain`` and evaluate its last checkpoint with each protocol.

    Args:
        pretrain: Pre-training config.
        protocols: ``linear``, ``knn``, ``selection``, ``finetune`` -> config (or None).
        out: Folder for all runs (``<out>/<config stem>/<protocol>``).
        pretrain_args: Extra ``ncl-cli fit`` arguments for pre-training.
        eval_args: Extra arguments for every evaluation run.
        protocol_args: Extra arguments of one protocol's runs, by protocol name
            (``linear`` applies to ``linear_z`` too).
        progress: Where each run is announced (default: a progress of this chain's runs).
        verbose: Keep Lightning's per-run banners, progress bars and model summaries.
        spaces: Spaces of the linear probe and fine-tuning (``h``, ``z``, ``p``; see
            [`protocol_runs`][ncl_lightning.studies.chain.protocol_runs]).

    Returns:
        ``{protocol: {metric key: value}}`` including ``pretrain`` (``linear_z`` and
        ``finetune_z`` for ``space: z``).
    """
    root = out / pretrain.stem
    runs = protocol_runs(protocols, spaces)
    own_progress = progress is None
    if progress is None:
        progress = Progress(1 + len(runs), "run")
    with progress.unit(f"{pretrain.stem} pretrain"):
        results = {"pretrain": _run("fit", pretrain, root / "pretrain", pretrain_args, verbose)}
    ckpt = results["pretrain"].pop("_last_ckpt", "")
    if not ckpt or not Path(str(ckpt)).is_file():
        raise ConfigError(
            f"{pretrain} wrote no last.ckpt (ModelCheckpoint save_last?)", key="pretrain"
        )
    for key, name, config, space_args in runs:
        own = (protocol_args or {}).get(name, ())
        extra = ["--model.init_args.checkpoint", str(ckpt), *eval_args, *own, *space_args]
        with progress.unit(f"{pretrain.stem} {key}"):
            results[key] = _run(SUBCOMMANDS[name], config, root / key, extra, verbose)
        results[key].pop("_last_ckpt", None)
    if own_progress:
        progress.finish()
    return results


def run_all(
    args: argparse.Namespace,
    out: Path,
    pretrain_args: Sequence[str],
    eval_args: Sequence[str],
) -> dict[str, dict[str, dict[str, float]]]:
    """Every config's chain into ``out`` (resumable), then its table and pictures.

    Results are saved after every config; a rerun reports the runs of the configs already
    done (``done before``) and runs the others
    ([`run_jobs`][ncl_lightning.studies.jobs.run_jobs]).
    """
    protocols = {n: getattr(args, n) for n in ("linear", "knn", "selection", "finetune")}
    out.mkdir(parents=True, exist_ok=True)
    done = out / "results.json"
    all_results: dict[str, dict[str, dict[str, float]]] = (
        json.loads(done.read_text()) if done.is_file() else {}
    )
    spaces = tuple(dict.fromkeys(args.spaces))
    evaluations = [key for key, *_ in protocol_runs(protocols, spaces)]
    runs = {c: 1 + len(evaluations) for c in args.pretrain}
    runs.update({c: 1 for c in args.supervised})
    progress = Progress(sum(runs.values()), "run")

    def complete(found: dict | None, pretrained: bool) -> dict | None:
        """A config's earlier results if they hold every run asked for now (a chain run
        before with ``--spaces h`` is run again for ``--spaces h z``)."""
        wanted = {"pretrain", *evaluations} if pretrained else {"supervised"}
        return found if found is not None and wanted <= set(found) else None

    def one(config: Path) -> dict[str, dict[str, float]]:
        if config in args.pretrain:
            result = run_chain(
                config,
                protocols,
                out,
                pretrain_args,
                eval_args,
                progress=progress,
                verbose=args.verbose,
                spaces=spaces,
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
        return result

    run_jobs(
        list(dict.fromkeys([*args.pretrain, *args.supervised])),
        one,
        lambda config: config.stem,
        lambda config: complete(all_results.get(config.stem), config in args.pretrain),
        progress=progress,
        units=runs.__getitem__,
        reason="done before",
        announce=False,
    )
    progress.finish()
    table = markdown({name: table_row(res) for name, res in all_results.items()})
    (out / "results.md").write_text(table + "\n")
    curves = selection_curves(all_results)
    if curves:
        accuracy_vs_k(curves, out / "accuracy_vs_k.png", "Linear accuracy vs selected dims")
    return all_results


def main(argv: Sequence[str] | None = None) -> dict:
    """Run the chain; returns ``{config stem: results}`` (with ``--seeds``: by seed)."""
    parser = ToolArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
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
        "--spaces", nargs="+", choices=SPACES, default=["h"],
        help="linear probe and fine-tuning on h (encoder), z (features) and/or p (raw "
        "projector output; NCL Table 7)",
    )  # fmt: skip
    parser.add_argument(
        "--verbose", action="store_true", help="keep Lightning's per-run banners and bars"
    )
    args = parser.parse_args(argv)
    return run_main(PROG, lambda: _chains(args))


def check_chain(args: argparse.Namespace) -> None:
    """The chain's inputs, before any run: something to train, config files (paths or
    packaged names) that exist, seeds ``seed_everything`` takes, an ``--out`` folder.

    Raises:
        ConfigError: Naming the argument.
    """
    if not (args.pretrain or args.supervised):
        raise ConfigError("nothing to run: give --pretrain and/or --supervised configs")
    for name in ("pretrain", "supervised", "linear", "knn", "selection", "finetune"):
        given = getattr(args, name)
        if isinstance(given, list):
            setattr(args, name, [config_file(c) for c in given])
        elif given is not None:
            setattr(args, name, config_file(given))
    if args.seeds is not None:
        check_seeds("--seeds", args.seeds)
    check_output_dir("--out", args.out)


def _chains(args: argparse.Namespace) -> dict:
    check_chain(args)
    if args.seeds is None:
        all_results = run_all(args, args.out, args.pretrain_args, args.eval_args)
        print((args.out / "results.md").read_text(), end="")
        return all_results
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
