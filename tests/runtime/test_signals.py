"""Pre-emption through the real entry point: a ``ncl-cli fit`` subprocess that gets
SIGTERM mid-epoch saves ``last.ckpt`` at the batch boundary, prints the command that resumes
it and exits ``128 + signum``, and that command finishes the run exactly as an uninterrupted
one: the next batch of the same epoch, equal weights and equal validation rows. SIGUSR1 (the
SLURM warning signal) takes the same path plus the requeue:
``tests/runtime/test_slurm.py::test_requeue_signal_then_exact_resume_of_the_same_run``."""

from __future__ import annotations

import csv
import logging
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
import torch
import yaml

from ncl_lightning.checkpoints.load import read_checkpoint
from ncl_lightning.data import DigitsDataModule
from ncl_lightning.runtime.signals import resume_command
from tests.conftest import ROOT
from tests.resume_helpers import digits_run_config, output_of
from tests.runtime.test_resume import STEPS, fit_here, reference_run, run_config, write


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
        assert proc.poll() is None, output_of(proc)
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def _metrics(run_dir: Path) -> list[dict[str, str]]:
    (path,) = run_dir.glob("digits/version_*/metrics.csv")
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
def test_signal_saves_last_and_exits_nonzero_then_resumes_exactly(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """The signalled run is a process of its own (its status and line are the subject); the
    resume and the uninterrupted run go through ``cli_main`` here (``test_resume.py``)."""
    signum = signal.SIGTERM
    run, marker = tmp_path / "run", tmp_path / "marker"
    proc = start(run_config(run, str(marker)), tmp_path / "run.yaml")
    wait_for(marker, proc)  # in the second epoch
    proc.send_signal(signum)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signum, out[-3000:]
    (last,) = run.glob("digits/version_0/checkpoints/last.ckpt")
    ckpt = read_checkpoint(last)
    assert STEPS < ckpt["global_step"] < 2 * STEPS  # mid-epoch
    done_in_epoch = ckpt["global_step"] - STEPS
    assert ckpt["DigitsDataModule"]["batches"] == done_in_epoch  # the loader's place
    lines = [line for line in out.splitlines() if line.startswith("ncl-cli: stopped by")]
    assert len(lines) == 1, out[-3000:]
    assert f"stopped by SIGTERM at step {ckpt['global_step']}" in lines[0]
    assert str(last) in lines[0] and lines[0].endswith("--ckpt_path last")
    assert "Traceback" not in out

    caplog.set_level(logging.INFO, logger="lightning.pytorch")  # where "Resuming from" goes
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        fit_here(write(tmp_path / "run.yaml", run_config(run)), "--ckpt_path", "last")
    assert f"Resuming from {last}" in caplog.text
    final = read_checkpoint(last)
    assert final["epoch"] == 1 and final["global_step"] == 2 * STEPS
    said = [str(w.message) for w in warned] + [caplog.text]
    assert not [m for m in said if "checkpoint that ended before the epoch ended" in m]

    # An uninterrupted run: the resumed one went on with the next batch, not the epoch's first
    reference = reference_run(tmp_path_factory)
    (ref,) = reference.glob("digits/version_0/checkpoints/last.ckpt")
    expected = read_checkpoint(ref)["state_dict"]
    differ = [k for k, v in final["state_dict"].items() if not torch.equal(v, expected[k])]
    assert not differ, differ
    # The epoch's validation, SEPIN included; the kNN bank of the interrupted epoch holds
    # only the batches trained after the resume, so val/knn_acc is left out.
    (want,) = [r for r in _metrics(reference) if r["epoch"] == "1" and r["val/z/sepin@1"]]
    (got,) = [r for r in _metrics(run) if r["epoch"] == "1" and r["val/z/sepin@1"]]
    differ = {k: (v, got[k]) for k, v in want.items() if k.startswith("val/") and
              k != "val/knn_acc" and got[k] != v}  # fmt: skip
    assert not differ, differ


def test_resume_command_keeps_the_arguments_and_asks_for_last() -> None:
    argv = ["/x/ncl-cli", "fit", "--config", "a b.yaml", "--ckpt_path", "old.ckpt", "--x=1"]
    assert resume_command(argv) == "ncl-cli fit --config 'a b.yaml' --x=1 --ckpt_path last"
    argv = ["/x/python", "fit", "--auto_resume=true", "--config", "c.yaml"]
    assert resume_command(argv) == "/x/python fit --config c.yaml --ckpt_path last"
