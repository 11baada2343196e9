"""Sparse-coding landscape study: Table 1 of Pokle et al. (AISTATS 2022) and its ablations.

Every run is an ordinary ``ncl-cli fit`` of a packaged config in ``ground_truth/`` (plus
overlays from its ``overlays/``). For each variant, sparsity ``Pr(non-zero)`` and seed (which
draws the dictionary, the samples, the masks and the initialisation) the study records the
dictionary recovery of the final encoder (max / median / min over atoms of
``max_i |cos(W_i, M_j)|``) and the curves of the min-max-cosine and the loss::

    python -m ncl_lightning.studies.landscape --out runs/landscape

writes ``results.json``, ``table.md`` (mean ± std over seeds, the paper's figures beside
ours) and ``min_max_cosine.png`` / ``loss.png``. Runs already in ``--out`` are reused; each
uses one CPU thread (the model is 50 x 50), ``--workers`` at once.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from ncl_lightning.foundation.resources import config_path
from ncl_lightning.plot.metrics_csv import read_metrics
from ncl_lightning.runtime.errors import ToolArgumentParser, run_main
from ncl_lightning.studies.checks import check_landscape_study
from ncl_lightning.studies.jobs import (
    cli_here,
    earlier_record,
    fingerprint,
    folder_args,
    fresh_attempt,
    run_jobs,
    slug,
    write_record,
)
from ncl_lightning.studies.spread import mean_std

PROG = "python -m ncl_lightning.studies.landscape"


@dataclass(frozen=True)
class Variant:
    """One row of the study: a base config plus overlays."""

    config: str
    overlays: tuple[str, ...] = ()
    group: str = "table1"
    description: str = ""

    def config_args(self) -> list[str]:
        """``--config`` arguments: the packaged base config, then each overlay in order."""
        names = [self.config, *(f"overlays/{overlay}" for overlay in self.overlays)]
        return [
            arg for name in names for arg in ("--config", str(config_path(f"ground_truth/{name}")))
        ]


PAPER_SIMSIAM = "SimSiam (Pokle et al. Table 1)"
ENCODER_ONLY = "SimSiam, encoder only"
_FIXED = "fixed_count_latents.yaml"
VARIANTS: dict[str, Variant] = {
    "SimCLR": Variant("sparse_coding_simclr.yaml", description="linear projector, InfoNCE"),
    PAPER_SIMSIAM: Variant(
        "sparse_coding_simsiam.yaml", description="projector + linear predictor, random init"
    ),
    ENCODER_ONLY: Variant(
        "sparse_coding_simsiam.yaml", ("encoder_only.yaml",), "ablation", "no projector/predictor"
    ),
    "SimSiam, encoder only + predictor": Variant(
        "sparse_coding_simsiam.yaml",
        ("encoder_only.yaml", "predictor.yaml"),
        "ablation",
        "linear predictor, no projector, random init (cf. Fig. 6)",
    ),
    "SimSiam, encoder only + warm start": Variant(
        "sparse_coding_simsiam.yaml",
        ("encoder_only.yaml", "warm_start.yaml"),
        "ablation",
        "W = M + N(0, I/p) (c = 1), no projector/predictor (cf. Fig. 4)",
    ),
    "SimSiam, encoder only + predictor + warm start": Variant(
        "sparse_coding_simsiam.yaml",
        ("encoder_only.yaml", "predictor.yaml", "warm_start.yaml"),
        "ablation",
        "linear predictor and warm start c = 1, no projector (cf. Fig. 5)",
    ),
    "SimSiam, encoder only + warm start c = 2 + row norm": Variant(
        "sparse_coding_simsiam.yaml",
        ("encoder_only.yaml", "warm_start_row_norm.yaml"),
        "ablation",
        "W = M + N(0, I/p^2), unit-norm rows after every step, no predictor (cf. Fig. 7)",
    ),
    "SimSiam (Pokle et al.) + warm start": Variant(
        "sparse_coding_simsiam.yaml", ("warm_start.yaml",), "ablation", "paper architecture"
    ),
    "SimCLR, fixed-count latents": Variant("sparse_coding_simclr.yaml", (_FIXED,), "latents"),
    "SimSiam (Pokle et al.), fixed-count latents": Variant(
        "sparse_coding_simsiam.yaml", (_FIXED,), "latents"
    ),
    "SimSiam, encoder only, fixed-count latents": Variant(
        "sparse_coding_simsiam.yaml", ("encoder_only.yaml", _FIXED), "latents"
    ),
    "NCL": Variant("sparse_coding_ncl.yaml", (), "extra", "SimCLR + ReLU on the projector output"),
    "BYOL": Variant("sparse_coding_byol.yaml", (), "extra", "linear predictor, EMA target"),
}
SPARSITIES = (0.1, 0.2, 0.3)
STATS = ("max", "median", "min")

# Pokle et al. (2022), Table 1: mean ± std over 5 runs of the max / median / min over atoms
# of the max-cosine, per model and Pr(z_i = ±1).
PAPER: dict[tuple[str, float], tuple[str, str, str]] = {
    ("SimCLR", 0.1): ("0.94 ± 0.005", "0.92 ± 0.004", "0.83 ± 0.16"),
    ("SimCLR", 0.2): ("0.94 ± 0.004", "0.93 ± 0.003", "0.90 ± 0.01"),
    ("SimCLR", 0.3): ("0.94 ± 0.006", "0.92 ± 0.007", "0.57 ± 0.019"),
    (PAPER_SIMSIAM, 0.1): ("0.94 ± 0.007", "0.87 ± 0.08", "0.47 ± 0.07"),
    (PAPER_SIMSIAM, 0.2): ("0.93 ± 0.008", "0.82 ± 0.01", "0.45 ± 0.005"),
    (PAPER_SIMSIAM, 0.3): ("0.678 ± 0.2", "0.45 ± 0.01", "0.37 ± 0.03"),
}


def paper_cell(variant: str, sparsity: float) -> str:
    """``max / median / min`` of Table 1 for ``(variant, sparsity)``, or ``""``."""
    found = PAPER.get((variant, round(sparsity, 9)))
    return " / ".join(found) if found else ""


def run_dir(out: Path, variant: str, sparsity: float, seed: int) -> Path:
    return out / "runs" / slug(variant) / f"sparsity_{sparsity}" / f"seed_{seed}"


def _read_curves(metrics_csv: Path) -> dict[str, list[float]]:
    """``step``, ``min_cos`` and ``loss`` of the training steps that logged both the
    dictionary's minimum cosine and the objective ([`read_metrics`][])."""
    series = read_metrics(metrics_csv)
    loss = {p.step: p.value for p in series.get("train/objective", [])}
    points = [p for p in series.get("train/dictionary/min", []) if p.step in loss]
    return {
        "step": [float(p.step) for p in points],
        "min_cos": [p.value for p in points],
        "loss": [loss[p.step] for p in points],
    }


def fit_args(
    variant: str, sparsity: float, seed: int, out: str, extra: Sequence[str], verbose: bool
) -> list[str]:
    """The ``ncl-cli fit`` arguments of one ``(variant, sparsity, seed)`` run."""
    root = run_dir(Path(out), variant, sparsity, seed)
    args = [
        "fit",
        *VARIANTS[variant].config_args(),
        "--seed_everything", str(seed),
        "--data.init_args.seed", str(seed),
        "--data.init_args.nonzero_prob", str(sparsity),
        "--trainer.enable_checkpointing", "false",
        *folder_args(root, logs=True, verbose=verbose),
        *extra,
    ]  # fmt: skip
    if any(o.startswith("warm_start") for o in VARIANTS[variant].overlays):
        # The WarmStart callback is the overlay's last callback: give it the run's seed.
        args += ["--trainer.callbacks.init_args.seed", str(seed)]
    return args


def run_one(
    variant: str,
    sparsity: float,
    seed: int,
    out: str,
    extra: Sequence[str] = (),
    verbose: bool = False,
) -> dict:
    """Train one ``(variant, sparsity, seed)`` through ``ncl-cli``; returns its record.

    Lightning's banners, progress bar and model summary are off unless ``verbose``.
    """
    import warnings

    import torch

    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", message=".*args parameter is intended.*")
    from ncl_lightning.metrics.functional.dictionary import dictionary_recovery

    root = run_dir(Path(out), variant, sparsity, seed)
    args = fit_args(variant, sparsity, seed, out, extra, verbose)
    made_by = fingerprint(args, out)
    fresh_attempt(root)
    cli = cli_here(args, verbose)
    weight = cli.model.backbone.dictionary_weight.detach().cpu()
    final = dictionary_recovery(weight, cli.datamodule.dictionary)
    record = {
        "variant": variant,
        "sparsity": sparsity,
        "seed": seed,
        "steps": cli.trainer.global_step,
        **{k: float(v) for k, v in final.items()},
        "curves": _read_curves(root / "logs" / "version_0" / "metrics.csv"),
        "fingerprint": made_by,
    }
    write_record(root / "result.json", record)
    return record


def summary_table(records: Sequence[dict], variants: Sequence[str]) -> str:
    """Markdown: one row per (variant, sparsity), mean ± std over seeds of max/median/min."""
    lines = [
        "| variant | Pr(non-zero) | seeds | max | median | min | paper max / median / min |",
        "|---|---|---|---|---|---|---|",
    ]
    for variant in variants:
        for sparsity in sorted({r["sparsity"] for r in records}):
            rows = [r for r in records if r["variant"] == variant and r["sparsity"] == sparsity]
            if not rows:
                continue
            cells = ["{:.3f} ± {:.3f}".format(*mean_std([r[s] for r in rows])) for s in STATS]
            paper = paper_cell(variant, sparsity)
            lines.append(
                f"| {variant} | {sparsity} | {len(rows)} | " + " | ".join(cells) + f" | {paper} |"
            )
    return "\n".join(lines)


GROUPS = {
    "table1": "Table 1: simplified SimCLR vs SimSiam (the paper's Bernoulli latents)",
    "ablation": "Ablations: projector, predictor and warm start (SimSiam)",
    "latents": "Latents: the authors' code's fixed count instead of the paper's Bernoulli",
    "extra": "Beyond the paper: NCL and BYOL",
}


def report(records: Sequence[dict], variants: Sequence[str]) -> str:
    """``summary_table`` per group of variants, each under a heading."""
    sections = []
    for group, title in GROUPS.items():
        names = [v for v in variants if VARIANTS[v].group == group]
        if group == "ablation" and names and PAPER_SIMSIAM in variants:
            names = [PAPER_SIMSIAM, *names]  # the baseline of the ablation
        if names:
            sections.append(f"### {title}\n\n{summary_table(records, names)}\n")
    return "\n".join(sections)


def plot_curves(records: Sequence[dict], key: str, ylabel: str, path: Path) -> None:
    """One panel per sparsity: mean ± std over seeds of ``key`` against the step."""
    from ncl_lightning.plot.curves import mean_std_curves  # matplotlib: only when drawn

    title = "Pr(non-zero) = {}".format
    panels: dict[str, dict] = {title(s): {} for s in sorted({r["sparsity"] for r in records})}
    for r in records:
        if (curves := r["curves"])["step"]:
            lines = panels[title(r["sparsity"])].setdefault(r["variant"], [])
            lines.append((curves["step"], curves[key]))
    mean_std_curves(panels, path, "step", ylabel)


def _describe(job: tuple) -> str:
    variant, sparsity, seed = job[:3]
    return f"landscape {variant} sparsity={sparsity} seed={seed}"


def _run_job(job: tuple, verbose: bool) -> dict:
    return run_one(*job, verbose)


def _earlier(job: tuple) -> dict | None:
    variant, sparsity, seed, out, extra = job
    made_by = fingerprint(fit_args(variant, sparsity, seed, out, extra, verbose=False), out)
    return earlier_record(run_dir(Path(out), variant, sparsity, seed) / "result.json", made_by)


def run_study(
    out: Path,
    variants: Sequence[str],
    sparsities: Sequence[float] = SPARSITIES,
    seeds: int = 3,
    workers: int = 2,
    extra: Sequence[str] = (),
    verbose: bool = False,
) -> list[dict]:
    """Run every ``(variant, sparsity, seed)`` (``workers`` at a time) and write the report.

    Prints ``[run k/N] ... | elapsed ... | ETA ...`` on stderr as runs start and end (with
    parallel workers, as they end); runs already in ``out`` are reported as reused.
    ``verbose`` keeps Lightning's per-run banners.
    """
    check_landscape_study(out, variants, list(VARIANTS), sparsities, seeds, workers, extra)
    out.mkdir(parents=True, exist_ok=True)
    jobs = [
        (v, s, seed, str(out), tuple(extra))
        for v in variants
        for s in sparsities
        for seed in range(seeds)
    ]
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    records = run_jobs(
        jobs,
        partial(_run_job, verbose=verbose),
        _describe,
        _earlier,
        workers=workers,
        pool=None if workers == 1 else ProcessPoolExecutor,
    )
    (out / "results.json").write_text(json.dumps(records))
    (out / "table.md").write_text(report(records, variants))
    plot_curves(records, "min_cos", "min over atoms of max cosine", out / "min_max_cosine.png")
    plot_curves(records, "loss", "training objective", out / "loss.png")
    return records


def main(argv: Sequence[str] | None = None) -> None:
    """The command line: one line and exit status 2 for a bad argument, before any run."""
    parser = ToolArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("runs/landscape"))
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), metavar="NAME",
                        help=f"any of {list(VARIANTS)}")  # fmt: skip
    parser.add_argument("--sparsity", nargs="+", type=float, default=list(SPARSITIES))
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument(
        "--run-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra ncl-cli argument for every run (repeat: --run-arg=--x)",
    )
    parser.add_argument(
        "--verbose", action="store_true", help="keep Lightning's per-run banners and bars"
    )
    args = parser.parse_args(argv)
    run_main(PROG, lambda: _run(args))


def _run(args: argparse.Namespace) -> None:
    records = run_study(
        args.out,
        args.variants,
        args.sparsity,
        args.seeds,
        args.workers,
        args.run_arg,
        args.verbose,
    )
    print(report(records, args.variants))
    print(f"\n{len(records)} runs; report in {args.out}")


if __name__ == "__main__":
    main()
