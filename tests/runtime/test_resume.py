"""Exact resume: 2 epochs == 1 epoch + a real kill mid-epoch + ``--ckpt_path last``.

The interrupted run is a real ``ncl-cli`` subprocess killed with SIGKILL in the middle of
its second epoch; the resumed run (``ncl-cli fit ... --ckpt_path last``, or the same job
started again with ``--auto_resume true``) continues from the ``last.ckpt`` written at the
end of the first. With deterministic settings on the CPU the final weights, the data
module's state and every row of ``metrics.csv`` equal those of an uninterrupted run,
SEPIN's included (its validation views are drawn again after the resume). A mid-epoch
checkpoint (a pre-empted job's) resumes with the next batch:
``tests/runtime/test_signals.py::test_signal_saves_last_and_exits_nonzero_then_resumes_exactly``.

Only the killed run is a process of its own (the kill is the subject); the uninterrupted
reference and the resumed run go through ``cli_main`` in the test's process, on one
thread as the subprocess (``OMP_NUM_THREADS=1``), so all three compute alike.
"""

from __future__ import annotations

import csv
import logging
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
import yaml

from ncl_lightning.checkpoints.load import read_checkpoint
from ncl_lightning.runtime.cli import cli_main
from tests.resume_helpers import digits_run_config, output_of

ROOT = Path(__file__).resolve().parents[2]
# Training batches an epoch (of the digits' 23 of 64): more than MarkSecondEpoch's
# after_batch (3), so the kill and a signal come in the middle of the second epoch.
STEPS = 8


def run_config(run_dir: Path, marker: str = "", workers: int = 0, augment_on: str = "cpu") -> dict:
    """The resume tests' deterministic BayesNCL run on the digits (SEPIN on), 2 epochs of
    :data:`STEPS` batches and 2 validation batches."""
    config = digits_run_config(run_dir, marker, workers, augment_on)
    config["trainer"].update(limit_train_batches=STEPS, limit_val_batches=2)
    return config


@contextmanager
def one_thread() -> Iterator[None]:
    """A run in this process computes as the ``OMP_NUM_THREADS=1`` subprocesses do; the
    run's ``deterministic: true`` is taken back afterwards."""
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic)


def fit_here(config: Path, *extra: str) -> None:
    """``ncl-cli fit --config <config> ...`` in this process, on one thread."""
    with one_thread():
        cli_main(["fit", "--config", str(config), *extra])


_REFERENCES: dict[tuple[int, str], Path] = {}


def reference_run(
    factory: pytest.TempPathFactory, workers: int = 0, augment_on: str = "cpu"
) -> Path:
    """The uninterrupted 2-epoch run of :func:`run_config` (its folder), fitted once per
    process: this module and ``test_signals.py`` compare with the same one."""
    key = (workers, augment_on)
    if key not in _REFERENCES:
        run = factory.mktemp(f"reference-{workers}-{augment_on}")
        fit_here(write(run / "run.yaml", run_config(run, "", workers, augment_on)))
        _REFERENCES[key] = run
    return _REFERENCES[key]


def _cli(config: Path, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "ncl_lightning.runtime.cli", "fit", "--config", str(config)]
    return subprocess.Popen(
        [*cmd, *extra], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip


def write(path: Path, config: dict) -> Path:
    path.write_text(yaml.safe_dump(config))
    return path


def _kill_in_second_epoch(config: Path, marker: Path, *extra: str) -> str:
    """Start ``ncl-cli fit`` of ``config``, SIGKILL it in its second epoch; its output."""
    proc = _cli(config, *extra)
    deadline = time.monotonic() + 300
    while not marker.exists():
        assert proc.poll() is None, output_of(proc)
        assert time.monotonic() < deadline, "the run never reached its second epoch"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)  # mid-epoch: no clean-up runs
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    return out


def _metrics(run_dir: Path) -> list[dict[str, str]]:
    (path,) = run_dir.glob("digits/version_*/metrics.csv")
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("workers", "augment_on", "resume"),
    [(0, "cpu", "--ckpt_path last"),
     (2, "device", "--auto_resume true")],  # the same job started again (a requeued job)
    ids=["0-cpu-ckpt_path_last", "2-device-auto_resume"],
)  # fmt: skip
def test_killed_run_resumes_exactly(
    tmp_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
    caplog,
    workers: int,
    augment_on: str,
    resume: str,
) -> None:
    caplog.set_level(logging.INFO, logger="lightning.pytorch")  # where "Resuming from" goes
    reference = reference_run(tmp_path_factory, workers, augment_on)

    run = tmp_path / "run"
    marker = tmp_path / "in-second-epoch"
    config = write(tmp_path / "run.yaml", run_config(run, str(marker), workers, augment_on))
    auto = resume.startswith("--auto_resume")
    out = _kill_in_second_epoch(config, marker, *(resume.split() if auto else ()))
    if auto:  # the job's first start: nothing to resume yet
        assert "auto_resume: no last checkpoint found; starting a new run" in out, out[-3000:]
    (last,) = run.glob("digits/version_0/checkpoints/last.ckpt")
    assert read_checkpoint(last)["epoch"] == 0  # written at the end of the first epoch

    caplog.clear()
    fit_here(config, *resume.split())
    assert f"Resuming from {last}" in caplog.text
    assert not list(run.glob("digits/version_1")), "the resumed run must continue version_0"

    want = read_checkpoint(next(reference.glob("digits/version_0/checkpoints/last.ckpt")))
    got = read_checkpoint(last)
    assert got["global_step"] == want["global_step"] == 2 * STEPS
    assert got["epoch"] == want["epoch"] == 1
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
