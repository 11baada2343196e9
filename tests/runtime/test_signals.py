"""Pre-emption through the real entry point: a ``ncl-cli fit`` subprocess that gets
SIGTERM (or SIGUSR1) mid-epoch saves ``last.ckpt`` at the batch boundary, prints the
command that resumes it and exits ``128 + signum``, and that command finishes the run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from ncl_lightning.checkpoints.load import read_checkpoint
from ncl_lightning.data import DigitsDataModule
from ncl_lightning.runtime.signals import resume_command
from tests.conftest import ROOT
from tests.resume_helpers import digits_run_config


def digits_config(run_dir: Path, marker: str = "", max_epochs: int = 2, **kwargs) -> dict:
    """The resume tests' small BayesNCL run on the digits, without SEPIN (not needed here)."""
    config = digits_run_config(run_dir, marker, max_epochs=max_epochs, **kwargs)
    callbacks = config["trainer"]["callbacks"]
    config["trainer"]["callbacks"] = [
        c for c in callbacks if "FeatureStatistics" not in c["class_path"]
    ]
    return config


def start(config: dict, path: Path, *extra: str) -> subprocess.Popen:
    """``python -m ncl_lightning.runtime.cli fit --config <path> ...`` in the repository root."""
    path.write_text(yaml.safe_dump(config))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "ncl_lightning.runtime.cli", "fit", "--config", str(path), *extra]
    return subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def digits_steps_per_epoch(batch_size: int) -> int:
    data = DigitsDataModule(batch_size=batch_size, num_workers=0)
    data.setup("fit")
    return len(data.train_dataloader())


def wait_for(path: Path, proc: subprocess.Popen, seconds: float = 300) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert proc.poll() is None, proc.communicate()[0][-3000:]
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGUSR1])
def test_signal_saves_last_and_exits_nonzero(tmp_path: Path, signum: int) -> None:
    run, marker = tmp_path / "run", tmp_path / "marker"
    proc = start(digits_config(run, str(marker)), tmp_path / "run.yaml")
    wait_for(marker, proc)  # in the second epoch
    proc.send_signal(signum)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signum, out[-3000:]
    (last,) = run.glob("digits/version_0/checkpoints/last.ckpt")
    ckpt = read_checkpoint(last)
    steps_per_epoch = digits_steps_per_epoch(batch_size=64)
    assert steps_per_epoch < ckpt["global_step"] < 2 * steps_per_epoch  # mid-epoch
    lines = [line for line in out.splitlines() if line.startswith("ncl-cli: stopped by")]
    assert len(lines) == 1, out[-3000:]
    name = signal.Signals(signum).name
    assert f"stopped by {name} at step {ckpt['global_step']}" in lines[0]
    assert str(last) in lines[0] and lines[0].endswith("--ckpt_path last")
    assert "Traceback" not in out

    resumed = start(digits_config(run), tmp_path / "run.yaml", "--ckpt_path", "last")
    out, _ = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, out[-3000:]
    assert f"Resuming from {last}" in out
    final = read_checkpoint(last)
    assert final["epoch"] == 1 and final["global_step"] == 2 * steps_per_epoch
    assert "resuming from a checkpoint that ended before the epoch ended" not in out
    if signum == signal.SIGTERM:  # the mid-epoch checkpoint resumes exactly
        reference = start(digits_config(tmp_path / "ref"), tmp_path / "ref.yaml")
        out, _ = reference.communicate(timeout=300)
        assert reference.returncode == 0, out[-3000:]
        (ref,) = (tmp_path / "ref").glob("digits/version_0/checkpoints/last.ckpt")
        expected = read_checkpoint(ref)["state_dict"]
        differ = [k for k, v in final["state_dict"].items() if not torch.equal(v, expected[k])]
        assert not differ, differ


def test_resume_command_keeps_the_arguments_and_asks_for_last() -> None:
    argv = ["/x/ncl-cli", "fit", "--config", "a b.yaml", "--ckpt_path", "old.ckpt", "--x=1"]
    assert resume_command(argv) == "ncl-cli fit --config 'a b.yaml' --x=1 --ckpt_path last"
    argv = ["/x/python", "fit", "--auto_resume=true", "--config", "c.yaml"]
    assert resume_command(argv) == "/x/python fit --config c.yaml --ckpt_path last"
