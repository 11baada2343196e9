"""Two real CSV runs for the plot tests: 2-epoch digits fits of NCL and BayesNCL via ncl-cli."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import ROOT

RUNS = ("digits_ncl", "digits_bayesncl")  # BayesNCL also logs val/gate/open_rate
# The statistics the default panels show (val/z/sparsity, val/z/semantic_consistency),
# without SEPIN's view passes, TopActivations' pictures and the checkpoints: not plotted.
STATISTICS = {
    "class_path": "ncl_lightning.callbacks.FeatureStatistics",
    "init_args": {"spaces": ["z"], "sepin": False},
}


@pytest.fixture(scope="module")
def csv_runs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """``<tmp>/<name>`` run roots (``<name>/version_0/metrics.csv`` inside) of the demo
    configs, shrunk to 2 epochs of 2 batches with validation every epoch (~3 s each)."""
    from ncl_lightning.runtime.cli import cli_main  # heavy: only when a slow test runs

    root = tmp_path_factory.mktemp("csv_runs")
    for name in RUNS:
        out = str(root / name)
        cli_main([
            "fit", "--config", str(ROOT / "configs" / "demo" / f"{name}.yaml"),
            "--trainer.max_epochs", "2", "--trainer.limit_train_batches", "2",
            "--trainer.limit_val_batches", "1", "--trainer.check_val_every_n_epoch", "1",
            "--trainer.log_every_n_steps", "1", "--trainer.num_sanity_val_steps", "0",
            "--trainer.precision", "32-true", "--trainer.enable_progress_bar", "false",
            "--trainer.default_root_dir", out, "--trainer.logger.init_args.save_dir", out,
            "--model.init_args.backbone.init_args.width", "8",
            "--trainer.callbacks", json.dumps([STATISTICS]),
        ])  # fmt: skip
    return [root / name for name in RUNS]
