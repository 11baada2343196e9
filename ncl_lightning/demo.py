"""``make demo``: CL vs NCL on scikit-learn's bundled digits, side by side, on CPU.

Trains both methods with the configs in ``configs/demo/`` through the real ``ncl-cli``
entry point (Lightning progress bar, CSV logs, checkpoints), then prints one table of the
final validation numbers and writes it to ``<out>/results.md``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from ncl_lightning.cli import cli_main

CONFIGS = Path(__file__).resolve().parents[1] / "configs" / "demo"
COLUMNS = {
    "online linear acc": ("val/online_acc", "{:.1%}"),
    "kNN acc": ("val/knn_acc", "{:.1%}"),
    "z sparsity": ("val/z_sparsity", "{:.1%}"),
    "active dims": ("val/z_active_dims", "{:.0f}"),
}


def run(method: str, out: Path, extra: list[str]) -> dict[str, float]:
    """Fit one demo config and return its final logged metrics as floats."""
    config = CONFIGS / f"digits_{method}.yaml"
    if not config.is_file():
        raise FileNotFoundError(
            f"demo config not found: {config} (run the demo from a clone of the repository)"
        )
    run_dir = str(out / method)
    args = ["fit", "--config", str(config), "--trainer.default_root_dir", run_dir]
    args += ["--trainer.logger.init_args.save_dir", run_dir, *extra]
    cli = cli_main(args)
    return {k: float(v) for k, v in cli.trainer.callback_metrics.items()}


def table(results: dict[str, dict[str, float]], dims: dict[str, int]) -> str:
    """Markdown table, one row per method."""
    lines = ["| method | " + " | ".join(COLUMNS) + " |", "|---" * (len(COLUMNS) + 1) + "|"]
    for method, metrics in results.items():
        cells = []
        for key, fmt in COLUMNS.values():
            cell = fmt.format(metrics[key]) if key in metrics else "n/a"
            if key == "val/z_active_dims" and key in metrics:
                cell += f" / {dims[method]}"
            cells.append(cell)
        lines.append(f"| {method.upper()} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> str:
    """Run the demo; unrecognised arguments are passed to every ``ncl-cli fit`` call."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("runs/demo"), help="run directory")
    parser.add_argument("--methods", nargs="+", default=["cl", "ncl"], help="demo configs to run")
    args, extra = parser.parse_known_args(argv)  # the rest goes to every `ncl-cli fit`
    results, dims = {}, {}
    start = time.perf_counter()
    for method in args.methods:
        results[method] = run(method, args.out, extra)
        dims[method] = _feature_dim(method)
    text = table(results, dims)
    minutes = (time.perf_counter() - start) / 60
    report = (
        f"{text}\n\nDigits (scikit-learn, 1797 images), validation split; "
        f"{minutes:.1f} min on CPU.\n"
    )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.md").write_text(report)
    print("\n" + report + f"Written to {args.out / 'results.md'}")
    return report


def _feature_dim(method: str) -> int:
    import yaml

    config = yaml.safe_load((CONFIGS / f"digits_{method}.yaml").read_text())
    return int(config["model"]["init_args"]["proj_output_dim"])


if __name__ == "__main__":
    main()
