"""Atomic checkpoint writes: a kill while saving leaves the previous file intact."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from ncl_lightning.checkpoints.io import AtomicCheckpointIO, atomic_save, is_partial
from ncl_lightning.runtime.cli import cli_main
from ncl_lightning.runtime.resume import run_checkpoints

ROOT = Path(__file__).resolve().parents[2]

# Saves v1, then starts saving v2 with a torch.save that stops half-way (and signals it).
WRITER = textwrap.dedent(
    """
    import io, sys, time, torch
    import ncl_lightning.checkpoints.io as io_module
    path, marker = sys.argv[1], sys.argv[2]
    io_module.atomic_save({"version": 1, "w": torch.ones(1000)}, path)
    real = torch.save
    def half_then_hang(obj, f):
        buf = io.BytesIO(); real(obj, buf); data = buf.getvalue()
        f.write(data[: len(data) // 2]); f.flush()
        open(marker, "w").write("writing")
        time.sleep(120)
    io_module.torch.save = half_then_hang
    io_module.atomic_save({"version": 2, "w": torch.zeros(1000)}, path)
    """
)


def test_kill_during_save_keeps_the_previous_checkpoint(tmp_path: Path) -> None:
    path, marker = tmp_path / "last.ckpt", tmp_path / "marker"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(marker)], env=env)
    deadline = time.monotonic() + 120
    while not marker.exists():
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    ckpt = torch.load(path, weights_only=True)  # complete and readable
    assert ckpt["version"] == 1 and torch.equal(ckpt["w"], torch.ones(1000))
    (partial,) = [p for p in tmp_path.iterdir() if is_partial(p)]
    assert partial.stat().st_size > 0
    assert list(run_checkpoints([tmp_path]).values()) == [path]  # never the partial file


def test_failed_save_leaves_no_temporary_file(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "last.ckpt"
    atomic_save({"version": 1}, path)

    def broken(obj, f):
        f.write(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr("ncl_lightning.checkpoints.io.torch.save", broken)
    with pytest.raises(OSError, match="disk full"):
        AtomicCheckpointIO().save_checkpoint({"version": 2}, path)
    assert torch.load(path, weights_only=True) == {"version": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]


@pytest.mark.slow
def test_cli_trainers_write_atomically(tmp_path: Path) -> None:
    cli = cli_main(["fit", "--config", str(ROOT / "configs/demo/digits_ncl.yaml"),
                    "--trainer.max_steps", "1", "--trainer.limit_val_batches", "0",
                    "--trainer.default_root_dir", str(tmp_path), "--trainer.logger", "false",
                    "--trainer.enable_progress_bar", "false"])  # fmt: skip
    assert type(cli.trainer.strategy.checkpoint_io) is AtomicCheckpointIO
    assert run_checkpoints([tmp_path])
