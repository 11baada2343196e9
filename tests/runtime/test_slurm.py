"""The SLURM path of ``examples/slurm/pretrain.sbatch``, run on this host.

The example's ``srun`` command line is read from the script and started as SLURM starts
it: two tasks, each with the ``SLURM_*`` environment Lightning's ``SLURMEnvironment``
reads (``SLURM_NTASKS``, ``SLURM_PROCID``, ``SLURM_LOCALID``, ``SLURM_JOB_ID``, ...). A
SIGUSR1 to both tasks (what ``--signal=USR1@120`` sends) saves ``last.ckpt`` in the run's
folder, calls ``scontrol requeue <job>`` (a stand-in on PATH records the call) and exits
138; the same command started again, as the requeued job, resumes that run with
``--auto_resume true`` and ends with exactly the weights of a run never interrupted.
"""

from __future__ import annotations

import shlex
import signal
import stat
import subprocess
import time
from pathlib import Path

import pytest
import torch
import yaml

from ncl_lightning.checkpoints.load import read_checkpoint
from tests.helpers.cluster import ROOT, digits_cluster_config, free_port, launch_env

SBATCH = ROOT / "examples" / "slurm" / "pretrain.sbatch"


def srun_command(script: Path) -> str:
    """The command of the script's ``srun`` line, without ``srun`` and its options."""
    text = script.read_text().replace("\\\n", " ")
    (line,) = [s.strip() for s in text.splitlines() if s.strip().startswith("srun ")]
    tokens = shlex.split(line, posix=False)
    start = 1
    while tokens[start].startswith("--"):
        start += 1
    return " ".join(tokens[start:])


def _scontrol(folder: Path) -> Path:
    folder.mkdir()
    log = folder / "calls"
    script = folder / "scontrol"
    script.write_text(f'#!/bin/sh\necho "$@" >> {log}\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return log


def _tasks(config: Path, job: str, bin_dir: Path) -> list[subprocess.Popen]:
    """The two tasks ``srun`` would start for ``job`` on one node."""
    port = str(free_port())
    command = f"exec {srun_command(SBATCH)}"  # exec: the signal reaches ncl-cli itself
    tasks = []
    for rank in (0, 1):
        env = launch_env(
            CONFIG=str(config), SLURM_JOB_ID=job, SLURM_JOB_NAME="ncl-pretrain",
            SLURM_NTASKS="2", SLURM_NTASKS_PER_NODE="2", SLURM_JOB_NUM_NODES="1",
            SLURM_NNODES="1", SLURM_NODEID="0", SLURM_PROCID=str(rank),
            SLURM_LOCALID=str(rank), SLURM_NODELIST="127.0.0.1",
            MASTER_ADDR="127.0.0.1", MASTER_PORT=port,
        )  # fmt: skip
        env["PATH"] = f"{bin_dir}:{env['PATH']}"
        args = ["bash", "-c", command, "pretrain.sbatch"]
        out = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT, "text": True}
        tasks.append(subprocess.Popen(args, cwd=ROOT, env=env, **out))
    return tasks


def _finish(tasks: list[subprocess.Popen], code: int = 0) -> str:
    outs = [task.communicate(timeout=300)[0] for task in tasks]
    for task, out in zip(tasks, outs, strict=True):
        assert task.returncode == code, out[-3000:]
    return outs[0]


def test_the_example_runs_ncl_cli_with_auto_resume() -> None:
    command = srun_command(SBATCH)
    assert command.startswith('ncl-cli fit --config "$CONFIG" --auto_resume true')
    assert '--trainer.devices "$SLURM_NTASKS_PER_NODE"' in command and command.endswith('"$@"')
    text = SBATCH.read_text()
    assert "#SBATCH --signal=USR1@" in text and "#SBATCH --requeue" in text


@pytest.mark.slow
@pytest.mark.ddp
def test_requeue_signal_then_exact_resume_of_the_same_run(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    marker = tmp_path / "in-second-epoch"
    cfg = digits_cluster_config(root, tmp_path / "unused.pt")
    cfg["trainer"].update(max_epochs=2, limit_train_batches=6)
    reference, config = tmp_path / "reference.yaml", tmp_path / "run.yaml"
    for path, mark in ((reference, ""), (config, str(marker))):
        cfg["trainer"]["callbacks"][1] = {
            "class_path": "tests.resume_helpers.MarkSecondEpoch",
            "init_args": {"marker": mark, "after_batch": 1},  # only the timing changes
        }
        path.write_text(yaml.safe_dump(cfg))
    calls = _scontrol(tmp_path / "bin")

    _finish(_tasks(reference, "1001", tmp_path / "bin"))  # never interrupted
    tasks = _tasks(config, "1002", tmp_path / "bin")
    deadline = time.monotonic() + 240
    while not marker.exists():
        assert all(t.poll() is None for t in tasks), _finish(tasks)
        assert time.monotonic() < deadline, "the run never reached its second epoch"
        time.sleep(0.05)
    for task in tasks:
        task.send_signal(signal.SIGUSR1)
    out = _finish(tasks, 128 + signal.SIGUSR1)
    last = root / "digits" / "slurm-1002" / "checkpoints" / "last.ckpt"
    assert "Run id slurm-1002 (from the SLURM job)" in out
    assert "stopped by SIGUSR1 at step " in out and str(last) in out
    assert "requeued SLURM job 1002 (scontrol requeue 1002)" in out
    assert calls.read_text() == "requeue 1002\n"  # rank zero only
    stopped_at = read_checkpoint(last)["global_step"]
    assert 6 < stopped_at < 12  # in the second epoch

    out = _finish(_tasks(config, "1002", tmp_path / "bin"))  # the requeued job
    assert f"Resuming from {last}" in out
    want = read_checkpoint(root / "digits" / "slurm-1001" / "checkpoints" / "last.ckpt")
    got = read_checkpoint(last)
    assert got["global_step"] == want["global_step"] == 12
    differ = [k for k, v in want["state_dict"].items() if not torch.equal(v, got["state_dict"][k])]
    assert not differ, differ
    assert sorted(p.name for p in (root / "digits").iterdir() if not p.name.startswith(".")) == [
        "slurm-1001",
        "slurm-1002",
    ]
    assert not list(root.rglob("hpc_ckpt*"))  # Lightning's own requeue stayed out
