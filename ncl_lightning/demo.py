"""``make demo``: CL, NCL and BayesNCL on scikit-learn's bundled digits, side by side, on CPU.

Fits the packaged configs ``demo/digits_{cl,ncl,bayesncl}`` (or ``--configs``: files or
packaged names) through the real ``ncl-cli`` entry point, then prints one table of the final
validation numbers (``<out>/results.md``) and writes the top-activation pictures side by
side, the runs' curves (``<out>/curves.png``) and the feature atlas of their last
checkpoints (``<out>/atlas/index.html``).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import NamedTuple

import torch
import yaml
from lightning.pytorch.loggers import CSVLogger

from ncl_lightning.atlas import build_atlas
from ncl_lightning.callbacks import TopActivations
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


def run(config: Path, out: Path, extra: list[str]) -> Run:
    """Fit one config; return its final logged metrics, top-activation PNG and log folder."""
    args = ["fit", "--config", str(config), *folder_args(out, verbose=True)]
    cli = cli_here([*args, *extra], verbose=True)  # Lightning's banners kept
    drawn = [c.last_paths for c in cli.trainer.callbacks if isinstance(c, TopActivations)]
    picture = drawn[0].get("top_activations") if drawn else None
    logger = cli.trainer.logger
    log_dir = Path(logger.log_dir) if isinstance(logger, CSVLogger) else None
    metrics = {k: float(v) for k, v in cli.trainer.callback_metrics.items()}
    return Run(metrics, picture, log_dir)


def table(results: dict[str, dict[str, float]], dims: dict[str, int]) -> str:
    """Markdown table, one row per method."""
    lines = ["| method | " + " | ".join(COLUMNS) + " |", "|---" * (len(COLUMNS) + 1) + "|"]
    for method, metrics in results.items():
        cells = []
        for key, fmt in COLUMNS.values():
            cell = fmt.format(metrics[key]) if key in metrics else "n/a"
            if key == "val/z/active_dims" and key in metrics:
                cell += f" / {dims[method]}"
            cells.append(cell)
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


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
    results, dims, pics, logs = {}, {}, {}, {}
    start = time.perf_counter()
    runs = run_jobs(
        args.configs,
        lambda config: run(config, args.out, extra),
        lambda config: f"{method_name(config)} ({label(config)})",
        lambda config: None,  # every run afresh
    )
    for config, done in zip(args.configs, runs, strict=True):
        name = method_name(config)
        results[name], pics[name], logs[name] = done
        dims[name] = int(
            yaml.safe_load(config.read_text())["model"]["init_args"]["proj_output_dim"]
        )
    minutes = (time.perf_counter() - start) / 60
    configs = ", ".join(label(c) for c in args.configs)
    report = f"{table(results, dims)}\n\nValidation split after the last epoch ({configs}); "
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
