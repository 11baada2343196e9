"""A real 2-process CPU DDP fit through ``ncl-cli``: with ``batch_scope: global`` each rank
loads half the batch, the rates are the paper's, and rank 0 alone prints the summary."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import ROOT


@pytest.mark.ddp
def test_two_processes_split_a_global_batch(tmp_path: Path) -> None:
    cmd = [
        sys.executable, "-m", "ncl_lightning.runtime.cli", "fit",
        "--config", str(ROOT / "configs" / "demo" / "digits_ncl.yaml"),
        "--trainer.devices", "2", "--trainer.strategy", "ddp", "--trainer.max_epochs", "1",
        "--trainer.limit_train_batches", "2", "--trainer.limit_val_batches", "0",
        "--trainer.logger", "false", "--trainer.callbacks", "null",
        "--trainer.enable_checkpointing", "false", "--trainer.enable_progress_bar", "false",
        "--trainer.default_root_dir", str(tmp_path),
        "--data.init_args.batch_size", "256", "--data.init_args.batch_scope", "global",
        "--data.init_args.num_workers", "0",
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    lines = [line for line in out.splitlines() if line.startswith("Batch:")]
    assert lines == [
        "Batch: 2 processes (1 node x 2 devices) x 128 per device = global batch 256 "
        "(batch_scope: global); learning rates 0.4, 0.1 -> 0.4, 0.1 (x 256/256, lr scaled by "
        "global batch / 256); loader: main process (num_workers: 0)"
        + (", pinned" if torch.cuda.is_available() else "")
    ]
