"""A short BayesNCL run on the real CIFAR-10 images logs the gate and the gated metrics."""

from __future__ import annotations

from pathlib import Path

import pytest

from ncl_lightning.runtime.cli import cli_main
from tests.conftest import ROOT


@pytest.mark.slow
def test_bayesncl_logs_gate_statistics_and_gated_metrics(
    cifar_subset: Path, tmp_path: Path
) -> None:
    args = [
        "fit",
        "--config", str(ROOT / "configs" / "subset" / "cifar10_subset_bayesncl.yaml"),
        "--data.init_args.root", str(cifar_subset),
        "--data.init_args.batch_size", "64",
        "--trainer.max_epochs", "1",
        # a few steps: the keys and the gate's bounds, not what training reaches, are checked
        "--trainer.limit_train_batches", "2",
        "--trainer.limit_val_batches", "2",  # also bounds SEPIN's and the pictures' passes
        "--trainer.num_sanity_val_steps", "0",
        "--trainer.precision", "32-true",  # bf16 autocast is slow on the CPU; not under test
        "--trainer.check_val_every_n_epoch", "1",
        "--trainer.enable_progress_bar", "false",
        "--trainer.default_root_dir", str(tmp_path),
        "--trainer.logger.init_args.save_dir", str(tmp_path),
    ]  # fmt: skip
    logged = cli_main(args).trainer.callback_metrics
    for key in ("open_rate", "open_freq_min", "open_freq_median", "open_freq_max",
                "never_open_dims"):  # fmt: skip
        assert f"val/gate/{key}" in logged, key
    assert 0.0 < float(logged["val/gate/open_rate"]) < 1.0
    assert {"train/kl", "train/contrastive", "train/gate/open_rate"} <= set(logged)
    for space in ("z", "mask"):  # the gated features and the gate itself
        for key in ("sparsity", "semantic_consistency", "semantic_entropy", "active_dims"):
            assert f"val/{space}/{key}" in logged, (space, key)
    # gated features are zero wherever the gate is closed, so at least as sparse as it
    assert float(logged["val/z/sparsity"]) >= float(logged["val/mask/sparsity"]) - 1e-6
