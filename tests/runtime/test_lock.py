"""A run folder is locked while a process trains in it: the same ``--auto_resume`` job
started twice is refused with one line, and the first run's files are left alone."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ncl_lightning.runtime import RunFolderInUseError, RunLock
from ncl_lightning.runtime.cli import main
from ncl_lightning.runtime.runs import lock_path
from tests.runtime.test_signals import digits_config, start, wait_for


def test_second_lock_on_a_folder_is_refused_and_released_with_the_first(tmp_path: Path) -> None:
    first = RunLock([tmp_path / "a", tmp_path / "b"]).acquire()
    assert (tmp_path / ".a.ncl-run.lock").is_file() and not (tmp_path / "a").exists()
    with pytest.raises(
        RunFolderInUseError, match=rf"^{tmp_path / 'b'}: another run .*pid {os.getpid()}"
    ):
        RunLock([tmp_path / "c", tmp_path / "b"]).acquire()
    RunLock([tmp_path / "c"]).acquire().release()  # the refused one let go of what it had
    first.release()
    RunLock([tmp_path / "a", tmp_path / "b"]).acquire().release()
    assert not any(tmp_path.glob(".*.ncl-run.lock"))  # a run that ends removes its files


def test_a_killed_holder_leaves_no_stale_lock(tmp_path: Path) -> None:
    code = (
        "import sys, time; from pathlib import Path; from ncl_lightning.runtime import RunLock;"
        "lock = RunLock([Path(sys.argv[1])]).acquire();"
        "print('locked', flush=True); time.sleep(60)"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(tmp_path / "run")], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "locked"
    with pytest.raises(RunFolderInUseError, match=f"pid {proc.pid}"):
        RunLock([tmp_path / "run"]).acquire()
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert lock_path(tmp_path / "run").is_file()  # the killed holder's file stays, unlocked
    RunLock([tmp_path / "run"]).acquire().release()  # taken over
    assert not lock_path(tmp_path / "run").exists()  # a run that ends removes its lock file


def test_a_process_holding_the_removed_lock_file_tries_the_new_one(tmp_path: Path) -> None:
    """The race of removal: B opens the lock file, A ends (removes it, unlocks), B locks
    the removed file; a third process C would then lock a new file beside B. B must see
    that its file was removed and lock the file at the path instead."""
    path = lock_path(tmp_path / "run")
    first = RunLock([tmp_path / "run"]).acquire()
    stale = open(path, "a+")  # B's open, before A ends  # noqa: SIM115
    first.release()
    assert not path.exists()
    fcntl.flock(stale.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)  # B gets the removed file's lock
    second = RunLock([tmp_path / "run"]).acquire()  # the path's file, not the stale one
    assert os.stat(path).st_ino != os.fstat(stale.fileno()).st_ino
    with pytest.raises(RunFolderInUseError, match=f"pid {os.getpid()}"):
        RunLock([tmp_path / "run"]).acquire()
    second.release()
    stale.close()


@pytest.mark.slow
def test_same_job_started_twice_is_refused_before_writing(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """The first job is a process of its own, held in its second epoch; the second is
    ``ncl-cli``'s ``main`` in this process (its exit status, line and writes are checked)."""
    run, marker = tmp_path / "run", tmp_path / "marker"
    config = digits_config(run, str(marker), pause=60.0)  # hold the second epoch
    config["trainer"].update(limit_train_batches=5, limit_val_batches=1)  # marked at batch 3
    first = start(config, tmp_path / "first.yaml", "--auto_resume", "true")
    try:
        wait_for(marker, first)
        (csv_path,) = run.glob("digits/version_0/metrics.csv")
        before = {p: p.stat().st_mtime_ns for p in run.rglob("*") if p.is_file()}
        before.pop(csv_path)  # the first run may still write its rows
        second = digits_config(run)
        second["trainer"].update(limit_train_batches=5, limit_val_batches=1)
        (tmp_path / "second.yaml").write_text(yaml.safe_dump(second))
        capsys.readouterr()
        with pytest.raises(SystemExit) as refused:
            main(["fit", "--config", str(tmp_path / "second.yaml"), "--auto_resume", "true"])
        assert first.poll() is None, "the first run ended before the second was refused"
    finally:
        first.send_signal(signal.SIGKILL)
        first.communicate(timeout=60)
    stderr = capsys.readouterr().err
    assert refused.value.code == 2, stderr[-3000:]
    errors = [line for line in stderr.splitlines() if line.startswith("ncl-cli: error")]
    assert len(errors) == 1 and "Traceback" not in stderr, stderr[-3000:]
    folder = run / "digits" / "version_0"
    assert f"{folder}: another run is training in this folder (pid {first.pid}" in errors[0]
    after = {p: p.stat().st_mtime_ns for p in run.rglob("*") if p.is_file() and p != csv_path}
    assert after == before  # the refused run wrote nothing
    assert not list(run.glob("digits/version_1"))
