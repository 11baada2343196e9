"""Exact resume: 2 epochs == 1 epoch + a real kill mid-epoch + ``--ckpt_path last``.

The interrupted run is a real ``ncl-cli`` subprocess killed with SIGKILL in the middle of
its second epoch; the resumed run continues from the ``last.ckpt`` written at the end of
the first. With deterministic settings on the CPU the final weights, the data module's
state and every row of ``metrics.csv`` equal those of an uninterrupted run, SEPIN's
included (its validation views are drawn again after the resume). A mid-epoch checkpoint
(a pre-empted job's) resumes with the next batch:
``tests/runtime/test_signals.py::test_signal_saves_last_and_exits_nonzero_then_resumes_exactly``.
"""

from __future__ import annotations

import csv
import math
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
from tests.resume_helpers import digits_run_config

ROOT = Path(__file__).resolve().parents[2]


def _cli(config: Path, *extra: str, wait: bool = True) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [
        sys.executable,
        "-m",
        "ncl_lightning.runtime.cli",
        "fit",
        "--config",
        str(config),
        *extra,
    ]
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    out = ""
    if wait:
        out, _ = proc.communicate(timeout=600)
        assert proc.returncode == 0, out[-3000:]
    return proc, out


def _write(path: Path, config: dict) -> Path:
    path.write_text(yaml.safe_dump(config))
    return path


def _kill_in_second_epoch(config: Path, marker: Path) -> None:
    proc, _ = _cli(config, wait=False)
    deadline = time.monotonic() + 300
    while not marker.exists():
        assert proc.poll() is None, proc.communicate()[0][-3000:]
        assert time.monotonic() < deadline, "the run never reached its second epoch"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)  # mid-epoch: no clean-up runs
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL


def _metrics(run_dir: Path) -> list[dict[str, str]]:
    (path,) = run_dir.glob("digits/version_*/metrics.csv")
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
@pytest.mark.parametrize(("workers", "augment_on"), [(0, "cpu"), (2, "device")])
def test_killed_run_resumes_exactly(tmp_path: Path, workers: int, augment_on: str) -> None:
    reference = tmp_path / "reference"
    _cli(_write(tmp_path / "ref.yaml", digits_run_config(reference, "", workers, augment_on)))

    run = tmp_path / "run"
    marker = tmp_path / "in-second-epoch"
    config = _write(tmp_path / "run.yaml", digits_run_config(run, str(marker), workers, augment_on))
    _kill_in_second_epoch(config, marker)
    (last,) = run.glob("digits/version_0/checkpoints/last.ckpt")
    assert read_checkpoint(last)["epoch"] == 0  # written at the end of the first epoch

    _, out = _cli(config, "--ckpt_path", "last")
    assert f"Resuming from {last}" in out
    assert not list(run.glob("digits/version_1")), "the resumed run must continue version_0"

    want = read_checkpoint(next(reference.glob("digits/version_0/checkpoints/last.ckpt")))
    got = read_checkpoint(last)
    assert got["global_step"] == want["global_step"] and got["epoch"] == want["epoch"] == 1
    assert want["state_dict"].keys() == got["state_dict"].keys()
    for key, value in want["state_dict"].items():
        assert torch.equal(value, got["state_dict"][key]), key
    want_rows, got_rows = _metrics(reference), _metrics(run)
    sepin = [row["val/z/sepin@1"] for row in want_rows if row.get("val/z/sepin@1")]
    assert len(sepin) == 2 and all(math.isfinite(float(v)) for v in sepin), sepin
    assert len(got_rows) == len(want_rows)
    for want_row, got_row in zip(want_rows, got_rows, strict=True):
        differ = {k: (v, got_row.get(k)) for k, v in want_row.items() if got_row.get(k) != v}
        assert got_row.keys() == want_row.keys() and not differ, differ  # (reference, resumed)


@pytest.mark.slow
def test_auto_resume_starts_fresh_then_resumes(tmp_path: Path) -> None:
    run = tmp_path / "run"
    config = _write(tmp_path / "run.yaml", digits_run_config(run))
    _, out = _cli(config, "--auto_resume", "true", "--trainer.max_epochs", "1")
    assert "no last checkpoint found; starting a new run" in out
    (last,) = run.glob("digits/version_0/checkpoints/last.ckpt")
    assert read_checkpoint(last)["epoch"] == 0
    _, out = _cli(config, "--auto_resume", "true")
    assert f"Resuming from {last}" in out
    assert read_checkpoint(last)["epoch"] == 1
    assert not list(run.glob("digits/version_1"))
