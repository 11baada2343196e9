"""Sparse-coding landscape study: Table 1 of Pokle et al. (AISTATS 2022) and its ablations.

Every run is an ordinary ``ncl-cli fit`` of a packaged config in ``ground_truth/`` (the
repository's ``configs/ground_truth/``, plus overlays from its ``overlays/``), so one cell
of the table can be rerun by hand. The paper rows use the authors' architecture and
their latents (a fixed count of non-zeros per sample); the ablations and the Bernoulli
rows say what they change. For each variant, sparsity
``Pr(non-zero) ∈ {0.1, 0.2, 0.3}`` and seed, the study trains on fresh data (the seed draws
the dictionary, the samples, the masks and the initialisation) and records the dictionary
recovery of the final encoder (max / median / min over atoms of
``max_i |cos(W_i, M_j)|``) and the curves of the min-max-cosine and the loss::

    python -m ncl_lightning.studies.landscape --out runs/landscape

writes ``results.json`` (every run), ``table.md`` (mean ± std over seeds, the paper's
figures beside ours) and ``min_max_cosine.png`` / ``loss.png`` (mean ± std curves).
Runs already in ``--out`` are reused, so an interrupted study resumes. Each run uses one
CPU thread (the model is 50 x 50; threads only add overhead) and ``--workers`` runs go
in parallel. Every argument is checked before any run starts; bad input is one line,
exit status 2.
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
from ncl_lightning.studies.jobs import cli_here, earlier_record, folder_args, run_jobs, slug
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
_BERNOULLI = "bernoulli_latents.yaml"
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
        "linear predictor, no projector",
    ),
    "SimSiam, encoder only + warm start": Variant(
        "sparse_coding_simsiam.yaml",
        ("encoder_only.yaml", "warm_start.yaml"),
        "ablation",
        "W = M + N(0, 1/p), no projector/predictor",
    ),
    "SimSiam, encoder only + predictor + warm start": Variant(
        "sparse_coding_simsiam.yaml",
        ("encoder_only.yaml", "predictor.yaml", "warm_start.yaml"),
        "ablation",
        "linear predictor and warm start, no projector",
    ),
    "SimSiam (Pokle et al.) + warm start": Variant(
        "sparse_coding_simsiam.yaml", ("warm_start.yaml",), "ablation", "paper architecture"
    ),
    "SimCLR, Bernoulli latents": Variant("sparse_coding_simclr.yaml", (_BERNOULLI,), "latents"),
    "SimSiam (Pokle et al.), Bernoulli latents": Variant(
        "sparse_coding_simsiam.yaml", (_BERNOULLI,), "latents"
    ),
    "SimSiam, encoder only, Bernoulli latents": Variant(
        "sparse_coding_simsiam.yaml", ("encoder_only.yaml", _BERNOULLI), "latents"
    ),
    "NCL": Variant("sparse_coding_ncl.yaml", (), "extra", "SimCLR + ReLU on the projector output"),
    "BYOL": Variant("sparse_coding_byol.yaml", (), "extra", "linear predictor, EMA target"),
}
SPARSITIES = (0.1, 0.2, 0.3)
STATS = ("max", "median", "min")

# What Pokle et al. (2022), Table 1, report (max-cosine summaries over 5 seeds).
PAPER = {
    ("SimCLR", "median"): "0.92-0.93",
    (PAPER_SIMSIAM, "min"): "0.37-0.47",
}


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
    result_file = root / "result.json"
    if (record := earlier_record(result_file)) is not None:
        return record
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
    if "warm_start.yaml" in VARIANTS[variant].overlays:
        # The WarmStart callback is the overlay's last callback: give it the run's seed.
        args += ["--trainer.callbacks.init_args.seed", str(seed)]
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
    }
    result_file.write_text(json.dumps(record))
    return record


def _mean_std(values: Sequence[float]) -> str:
    return "{:.3f} ± {:.3f}".format(*mean_std(values))


def summary_table(records: Sequence[dict], variants: Sequence[str]) -> str:
    """Markdown: one row per (variant, sparsity), mean ± std over seeds of max/median/min."""
    lines = [
        "| variant | Pr(non-zero) | seeds | max | median | min | paper |",
        "|---|---|---|---|---|---|---|",
    ]
    for variant in variants:
        for sparsity in sorted({r["sparsity"] for r in records}):
            rows = [r for r in records if r["variant"] == variant and r["sparsity"] == sparsity]
            if not rows:
                continue
            cells = [_mean_std([r[s] for r in rows]) for s in STATS]
            paper = ", ".join(f"{s} {v}" for (v_, s), v in PAPER.items() if v_ == variant)
            lines.append(
                f"| {variant} | {sparsity} | {len(rows)} | " + " | ".join(cells) + f" | {paper} |"
            )
    return "\n".join(lines)


GROUPS = {
    "table1": "Table 1: simplified SimCLR vs SimSiam (the authors' latents)",
    "ablation": "Ablations: projector, predictor and warm start (SimSiam)",
    "latents": "Latents: i.i.d. Bernoulli supports instead of the authors' fixed count",
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
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    sparsities = sorted({r["sparsity"] for r in records})
    variants = list(dict.fromkeys(r["variant"] for r in records))
    fig, axes = plt.subplots(1, len(sparsities), figsize=(5 * len(sparsities), 3.6), squeeze=False)
    for ax, sparsity in zip(axes[0], sparsities, strict=True):
        for variant in variants:
            runs = [
                r["curves"]
                for r in records
                if r["variant"] == variant and r["sparsity"] == sparsity and r["curves"]["step"]
            ]
            if not runs:
                continue
            length = min(len(c["step"]) for c in runs)
            values = np.array([c[key][:length] for c in runs])
            steps = np.array(runs[0]["step"][:length])
            mean, std = values.mean(0), values.std(0)
            ax.plot(steps, mean, label=variant)
            ax.fill_between(steps, mean - std, mean + std, alpha=0.2)
        ax.set_title(f"Pr(non-zero) = {sparsity}")
        ax.set_xlabel("step")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _describe(job: tuple) -> str:
    variant, sparsity, seed = job[:3]
    return f"landscape {variant} sparsity={sparsity} seed={seed}"


def _run_job(job: tuple, verbose: bool) -> dict:
    return run_one(*job, verbose)


def _earlier(job: tuple) -> dict | None:
    return earlier_record(run_dir(Path(job[3]), *job[:3]) / "result.json")


def _run_jobs(jobs: Sequence[tuple], workers: int, verbose: bool) -> list[dict]:
    """``run_one`` of every job (in ``workers`` processes), with a progress line per run
    ([`run_jobs`][ncl_lightning.studies.jobs.run_jobs])."""
    return run_jobs(
        jobs,
        partial(_run_job, verbose=verbose),
        _describe,
        _earlier,
        workers=workers,
        pool=None if workers == 1 else ProcessPoolExecutor,
    )


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
    records = _run_jobs(jobs, workers, verbose)
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
