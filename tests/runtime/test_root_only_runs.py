"""Runs placed by ``--trainer.default_root_dir`` alone (the way the docs place them): every
resume path finds them, and no logger setting writes into another run or leaves the root.

Regressions (issue "Reliability IV"): the resume search looked in the config's logger
``save_dir`` instead of the root the loggers followed (``--ckpt_path last`` said there was
no ``last.ckpt``, ``--auto_resume`` trained ``version_1`` from scratch, a run id from the
environment was refused as existing); a run folder moved whole wrote ``last-v1.ckpt``
beside a stale ``last.ckpt``; ``--trainer.logger.init_args.version 0`` replaced an existing
run's ``metrics.csv``; a logger name, version or W&B id of ``../..`` or an absolute path, or
one edited into a checkpoint's record, put the run outside the root.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from ncl_lightning.checkpoints.record import RECORD_KEY
from ncl_lightning.runtime.cli import cli_main, main
from tests.conftest import ROOT

DEMO = ROOT / "configs" / "demo" / "digits_ncl.yaml"  # its logger's save_dir is runs/demo
STEPS = 2  # training batches an epoch


def _args(root: Path, epochs: int, *extra: str) -> list[str]:
    return [
        "fit", "--config", str(DEMO),
        "--trainer.default_root_dir", str(root),
        "--trainer.max_epochs", str(epochs),
        "--trainer.limit_train_batches", str(STEPS),
        "--trainer.limit_val_batches", "1",
        "--trainer.enable_progress_bar", "false",
        *extra,
    ]  # fmt: skip


def _fit(root: Path, epochs: int, *extra: str) -> Path:
    """Fit here; the run folder of the finished run."""
    cli = cli_main(_args(root, epochs, *extra))
    return Path(cli.trainer.logger.log_dir)


def _refused(root: Path, capsys: pytest.CaptureFixture, *extra: str) -> str:
    """The one ``ncl-cli: error:`` line of a refused fit (exit status 2)."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main(_args(root, 1, *extra))
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("ncl-cli: error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def _step(folder: Path) -> int:
    return torch.load(folder / "checkpoints" / "last.ckpt", weights_only=True)["global_step"]


@pytest.mark.slow
def test_root_only_run_resumes_by_last_auto_resume_and_after_a_move(tmp_path: Path) -> None:
    root = tmp_path / "root"
    run = _fit(root, 1)
    assert run == root / "digits_ncl" / "version_0" and _step(run) == STEPS
    assert _fit(root, 2, "--ckpt_path", "last") == run and _step(run) == 2 * STEPS
    assert _fit(root, 3, "--auto_resume", "true") == run and _step(run) == 3 * STEPS
    assert sorted(p.name for p in run.parent.iterdir()) == ["version_0"]

    moved = tmp_path / "moved"
    shutil.move(root, moved)
    here = _fit(moved, 4, "--ckpt_path", "last")
    assert here == moved / "digits_ncl" / "version_0" and _step(here) == 4 * STEPS
    assert not list(here.glob("checkpoints/last-v*.ckpt"))  # last.ckpt itself moved on


@pytest.mark.slow
def test_a_run_id_from_the_environment_resumes_with_the_root_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NCL_RUN_ID", "job7")
    root = tmp_path / "root"
    run = _fit(root, 1)
    assert run == root / "digits_ncl" / "job7"
    assert _fit(root, 2, "--auto_resume", "true") == run and _step(run) == 2 * STEPS


@pytest.mark.slow
def test_no_logger_setting_writes_into_another_run_or_leaves_the_root(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    root = tmp_path / "root"
    run = _fit(root, 1)
    metrics = (run / "metrics.csv").read_bytes()
    version = ("--trainer.logger.init_args.version", "0")
    line = _refused(root, capsys, *version)
    assert "already holds a run" in line and "digits_ncl/version_0" in line, line
    line = _refused(root, capsys, *version, "--new_run", "true", "--ckpt_path", "last")
    assert "already holds a run" in line, line
    for key, value in [("version", "../../x"), ("name", str(tmp_path / "abs"))]:
        line = _refused(root, capsys, f"--trainer.logger.init_args.{key}", value)
        assert "is not inside trainer.default_root_dir" in line, line

    last = run / "checkpoints" / "last.ckpt"  # a record edited to name another folder
    ckpt = torch.load(last, weights_only=True)
    for logger in ckpt[RECORD_KEY]["loggers"]:
        logger["version"] = "../../victim"
    torch.save(ckpt, last)
    line = _refused(root, capsys, "--ckpt_path", "last")
    assert "is not inside trainer.default_root_dir" in line, line

    assert (run / "metrics.csv").read_bytes() == metrics
    assert sorted(p.name for p in tmp_path.iterdir()) == ["root"]
    assert sorted(p.name for p in run.parent.iterdir()) == ["version_0"]
