"""Run identity, unit by unit: ids, the choice of the checkpoint to resume, the folders a
new run may not reuse, the files that record a run, and the SLURM requeue."""

from __future__ import annotations

import os
import stat
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from lightning.pytorch.loggers import CSVLogger

from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.methods.record import run_folder
from ncl_lightning.runtime.resume import run_checkpoints, select_checkpoint
from ncl_lightning.runtime.runs import (
    check_new_run,
    git_state,
    place_checkpoints,
    run_id,
    set_logger_versions,
    slurm_job,
)
from ncl_lightning.runtime.signals import requeue, resume_command

SLURM = {"SLURM_NTASKS": "2", "SLURM_JOB_ID": "812", "SLURM_JOB_NAME": "ncl"}


def _trainer(root: Path, loggers=(), dirpath: str | None = None) -> SimpleNamespace:
    checkpoint = SimpleNamespace(dirpath=dirpath)
    return SimpleNamespace(
        default_root_dir=root, loggers=list(loggers), checkpoint_callbacks=[checkpoint]
    )


def _ckpt(path: Path, age_s: float = 0.0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x")
    when = time.time() - age_s
    os.utime(path, (when, when))
    return path


@pytest.mark.parametrize("good", ["version_0", "slurm-812_3", "a", "run.2026-11-24", "x" * 64])
def test_run_ids_that_name_a_folder_and_a_wandb_run(good: str) -> None:
    assert run_id(good, {}) == (good, "--run_id")


@pytest.mark.parametrize("bad", ["", "-x", "a/b", "a b", "x" * 65, "ü", "a:b"])
def test_other_run_ids_are_refused_naming_the_key(bad: str) -> None:
    with pytest.raises(ConfigError, match=r"^run_id: ") as err:
        run_id(bad, {})
    assert err.value.key == "run_id"


def test_the_slurm_job_names_the_run() -> None:
    assert run_id(None, SLURM) == ("slurm-812", "the SLURM job")
    array = {**SLURM, "SLURM_ARRAY_JOB_ID": "800", "SLURM_ARRAY_TASK_ID": "3"}
    assert run_id(None, array)[0] == "slurm-800_3"
    assert slurm_job(array) == "800_3" and slurm_job(SLURM) == "812"
    cluster = {**array, "SLURM_CLUSTER_NAME": "jean zay"}  # ids are unique per cluster
    assert run_id(None, cluster)[0] == "slurm-jean-zay-800_3" and slurm_job(cluster) == "800_3"
    # An interactive allocation runs many things; outside SLURM there is no job.
    assert run_id(None, {**SLURM, "SLURM_JOB_NAME": "bash"}) is None
    assert run_id(None, {}) is None and slurm_job({}) is None
    assert run_id(None, {**SLURM, "NCL_RUN_ID": "mine"}) == ("mine", "$NCL_RUN_ID")
    assert run_id("given", {**SLURM, "NCL_RUN_ID": "mine"}) == ("given", "--run_id")
    with pytest.raises(ConfigError, match="run_id"):
        run_id(None, {"NCL_RUN_ID": "a/b"})


def test_candidates_are_runs_with_their_newest_last_checkpoint(tmp_path: Path) -> None:
    a = _ckpt(tmp_path / "digits/version_0/checkpoints/last.ckpt", age_s=100)
    a_new = _ckpt(tmp_path / "digits/version_0/checkpoints/last-v1.ckpt", age_s=10)
    b = _ckpt(tmp_path / "ncl/slurm-7/checkpoints/last.ckpt", age_s=50)
    _ckpt(tmp_path / "ncl/slurm-7/checkpoints/epoch=0-step=3.ckpt")  # not a last one
    _ckpt(tmp_path / "ncl/other/checkpoints/.last.ckpt.tmp-123")  # a partial write
    found = run_checkpoints([tmp_path, tmp_path / "missing", None])
    assert {folder.name: path for folder, path in found.items()} == {
        "version_0": a_new.resolve(),
        "slurm-7": b.resolve(),
    }
    assert run_folder(a) == a.parent.parent
    assert run_folder(tmp_path / "flat/last.ckpt") == tmp_path / "flat"


def test_two_runs_in_one_root_are_never_guessed(tmp_path: Path) -> None:
    # The regression: two seeds in one root resumed each other's newest last.ckpt.
    _ckpt(tmp_path / "digits/version_0/checkpoints/last.ckpt", age_s=100)
    new = _ckpt(tmp_path / "digits/version_1/checkpoints/last.ckpt")
    found = run_checkpoints([tmp_path])
    for required in (True, False):  # --ckpt_path last, --auto_resume
        with pytest.raises(ConfigError, match=r"^ckpt_path: 2 runs under R have a last") as err:
            select_checkpoint(found, None, required, "R")
        message = str(err.value)
        assert "version_0 (" in message and "version_1 (" in message
        assert "--run_id <id>" in message and "\n" not in message
    old = tmp_path / "digits/version_0/checkpoints/last.ckpt"
    assert select_checkpoint(found, "version_0", True, "R") == old.resolve()
    assert select_checkpoint(found, "version_1", False, "R") == new.resolve()


def test_a_run_id_without_a_checkpoint(tmp_path: Path) -> None:
    found = run_checkpoints([tmp_path])
    assert select_checkpoint(found, "slurm-9", False, "R") is None  # auto_resume: new run
    assert select_checkpoint(found, None, False, "R") is None
    with pytest.raises(ConfigError, match=r"no last.ckpt under R; drop --ckpt_path"):
        select_checkpoint(found, None, True, "R")
    _ckpt(tmp_path / "digits/version_0/checkpoints/last.ckpt")
    found = run_checkpoints([tmp_path])
    with pytest.raises(ConfigError, match=r"run slurm-9 has no last.ckpt under R; runs with one"):
        select_checkpoint(found, "slurm-9", True, "R")
    assert select_checkpoint(found, None, False, "R") == next(iter(found.values()))


def test_a_run_without_a_logger_keeps_its_checkpoints_in_its_own_folder(tmp_path: Path) -> None:
    def placed(given: str | None, resumed: Path | None) -> Path:
        trainer = _trainer(tmp_path)
        place_checkpoints(trainer, given, resumed)
        return Path(trainer.checkpoint_callbacks[0].dirpath)

    assert placed("a", None) == tmp_path / "a/checkpoints"
    fresh = placed(None, None)
    assert fresh.parent.parent == tmp_path and fresh.parent.name.startswith("run-")
    mine = tmp_path / "run-1/checkpoints/last.ckpt"  # a run of this root resumed: its folder
    assert placed(None, mine) == tmp_path / "run-1/checkpoints"
    elsewhere = placed(None, tmp_path.parent / "x/last.ckpt")
    assert elsewhere.parent.name.startswith("run-")  # a file from elsewhere: a new run


def test_the_run_id_becomes_every_loggers_version() -> None:
    csv = {"class_path": "lightning.pytorch.loggers.CSVLogger", "init_args": {"save_dir": "r"}}
    wandb = {"class_path": "x.WandbLogger", "init_args": {"version": None, "id": None}}
    set_logger_versions([csv, wandb], "slurm-5")
    assert csv["init_args"]["version"] == wandb["init_args"]["version"] == "slurm-5"
    set_logger_versions(True, "slurm-5")  # Lightning's default logger: nothing to set
    own = {"class_path": "x.WandbLogger", "init_args": {"id": "abc"}}
    with pytest.raises(ConfigError, match="WandbLogger version 'abc' differs from run_id 'z'"):
        set_logger_versions(own, "z")
    set_logger_versions(own, "abc")
    assert own["init_args"]["version"] == "abc"


def test_the_folder_of_a_logger_is_where_lightning_puts_its_checkpoints(tmp_path: Path) -> None:
    csv = CSVLogger(tmp_path, "digits")
    assert run_folder(_trainer(tmp_path, [csv])) == tmp_path / "digits/version_0"
    csv = CSVLogger(tmp_path, "d", "slurm-1")
    assert run_folder(_trainer(tmp_path, [csv])) == tmp_path / "d/slurm-1"
    assert run_folder(_trainer(tmp_path, [], str(tmp_path / "r/checkpoints"))) == tmp_path / "r"


def test_a_new_run_never_writes_into_an_existing_run(tmp_path: Path) -> None:
    empty, used = tmp_path / "a", tmp_path / "b"
    empty.mkdir()
    _ckpt(used / "config.yaml")
    check_new_run(_trainer(tmp_path, [], str(empty)), "a")
    check_new_run(_trainer(tmp_path, [], str(tmp_path / "missing")), "a")
    with pytest.raises(ConfigError, match=r"^run_id: run b already exists .*--auto_resume true"):
        check_new_run(_trainer(tmp_path, [], str(used)), "b")


def test_git_state_of_a_checkout_and_of_a_plain_folder(tmp_path: Path) -> None:
    assert git_state(tmp_path) is None
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}  # fmt: skip
    for args in (["init", "-q"], ["add", "f"], ["commit", "-qm", "x"]):
        if args[0] == "add":
            (tmp_path / "f").write_text("1")
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, env=env)
    head = subprocess.run(
        ["git", "-C", str(tmp_path), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    assert git_state(tmp_path) == {"commit": head, "dirty": False}
    (tmp_path / "f").write_text("2")
    assert git_state(tmp_path) == {"commit": head, "dirty": True}


def test_resume_command_names_the_run() -> None:
    argv = ["/x/ncl-cli", "fit", "--run_id", "old", "--config", "c.yaml", "--run_id=x"]
    assert resume_command(argv, "slurm-3") == (
        "ncl-cli fit --config c.yaml --run_id slurm-3 --ckpt_path last"
    )


def _fake_scontrol(folder: Path, exit_code: int) -> Path:
    folder.mkdir(exist_ok=True)
    script = folder / "scontrol"
    log = folder / "calls"
    script.write_text(f'#!/bin/sh\necho "$@" >> {log}\necho "denied" >&2\nexit {exit_code}\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return log


def test_requeue_calls_scontrol_and_says_what_happened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = _fake_scontrol(tmp_path / "ok", 0)
    monkeypatch.setenv("PATH", f"{tmp_path / 'ok'}{os.pathsep}{os.environ['PATH']}")
    assert requeue("800_3") == "requeued SLURM job 800_3 (scontrol requeue 800_3)"
    assert log.read_text() == "requeue 800_3\n"
    _fake_scontrol(tmp_path / "no", 1)
    monkeypatch.setenv("PATH", f"{tmp_path / 'no'}{os.pathsep}{os.environ['PATH']}")
    message = requeue("9")
    assert message.startswith("could not requeue SLURM job 9 (scontrol exit 1: denied)")
    assert message.endswith("it resumes with --auto_resume true")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert "scontrol not found" in requeue("9")
