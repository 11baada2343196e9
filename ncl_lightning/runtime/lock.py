"""One process trains in a run folder at a time.

Two copies of one job (an ``--auto_resume`` job submitted twice, two array tasks with
the same config) would otherwise resume the same checkpoint and write into one version
folder: interleaved ``metrics.csv`` rows, two sets of checkpoints. [`RunLock`][]
takes an exclusive ``flock`` on ``.<folder name>.ncl-run.lock`` beside each run folder
(not inside it: Lightning warns about non-empty new folders) before the run writes
anything else, and a second process is refused with one line naming the folder and the
process holding it. The lock belongs to the open file: it is released when the process
ends, however it ends (a killed run leaves no stale lock), and the file's text (pid,
host, start time) is only there to be read by a person. A run that ends removes its lock
file, and a run that starts removes the files of killed processes beside its own
([`remove_stale_locks`][]).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import os
import socket
import time
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

from lightning.pytorch.callbacks import Callback

from ncl_lightning.foundation.errors import NCLError
from ncl_lightning.runtime.runs import logger_folder

LOCK_SUFFIX = ".ncl-run.lock"
BUSY_RETRY_S = 0.2


def lock_path(folder: Path) -> Path:
    """The lock file of ``folder``: ``<parent>/.<name>.ncl-run.lock``."""
    return folder.parent / f".{folder.name}{LOCK_SUFFIX}"


class RunFolderInUseError(NCLError, OSError):
    """Another process is training in this run folder (refused before anything is
    written, like a bad input: ``ncl-cli`` exits with status 2)."""


def run_folders(trainer: Any) -> list[Path]:
    """The folders a training run writes its logs and checkpoints to.

    Args:
        trainer: A Trainer whose loggers and checkpoint callbacks are configured (their
            folders need not exist yet).

    Returns:
        Each logger's own folder (``log_dir``, or ``save_dir/name/version`` where the
        version is already known, e.g. a resumed W&B run), each ``ModelCheckpoint``
        ``dirpath`` given in the config, and ``default_root_dir`` when nothing else is.
    """
    folders: list[Path] = []
    for logger in trainer.loggers:
        folder = logger_folder(logger, trainer.default_root_dir)  # W&B: once its id is known
        if folder is not None:
            folders.append(folder)
    for callback in trainer.checkpoint_callbacks:
        if getattr(callback, "dirpath", None):
            folders.append(Path(callback.dirpath))
    if not folders:
        folders.append(Path(trainer.default_root_dir))
    return list(dict.fromkeys(p.expanduser().resolve() for p in folders))


class RunLock(Callback):
    """Exclusive locks on a run's folders, held until the fit ends (as a callback: its
    teardown or an exception releases them) or the process exits."""

    def __init__(self) -> None:
        self._files: list[tuple[Path, IO[str]]] = []

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        self.release()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self.release()

    def __getstate__(self) -> dict[str, Any]:
        return {"_files": []}  # a spawned process holds no lock of its own

    def acquire(self, folders: Iterable[Path]) -> None:
        """Lock every folder (creating its parent), or lock none.

        Raises:
            RunFolderInUseError: Another process holds one of them (named, with the
                holder's pid, host and start time).
        """
        for folder in folders:
            path = lock_path(folder)
            path.parent.mkdir(parents=True, exist_ok=True)
            handle = _lock_file(path)
            if handle is None:
                holder = _holder(path)
                self.release()
                raise RunFolderInUseError(
                    f"{folder}: another run is training in this folder ({holder}); wait for "
                    "it to end, or give this run its own folder (trainer.default_root_dir, "
                    "the logger's save_dir/version)"
                ) from None
            handle.seek(0)
            handle.truncate()
            started = dt.datetime.now().isoformat(timespec="seconds")
            handle.write(f"pid {os.getpid()} on {socket.gethostname()} since {started}\n")
            handle.flush()
            self._files.append((path, handle))
            remove_stale_locks(path.parent)

    def release(self) -> None:
        """Remove the lock files and unlock every folder."""
        for path, handle in self._files:
            try:
                if _same_file(path, handle):
                    path.unlink()  # still locked: a process waiting on it retries
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
                handle.close()
        self._files.clear()


def remove_stale_locks(parent: Path) -> list[Path]:
    """Remove the lock files in ``parent`` that no process holds (left by killed runs).

    Returns:
        The files removed.
    """
    removed = []
    for path in sorted(parent.glob(f".*{LOCK_SUFFIX}")):
        with contextlib.suppress(OSError):
            handle = open(path, "a+")  # noqa: SIM115 - closed below
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                handle.close()
                continue  # held: a run is training there
            if _same_file(path, handle) and path.stat().st_size > 0:  # empty: just created
                path.unlink()
                removed.append(path)
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
            handle.close()
    return removed


def _same_file(path: Path, handle: IO[str]) -> bool:
    """Whether ``path`` is still the file ``handle`` has open (not removed or replaced)."""
    try:
        return os.stat(path).st_ino == os.fstat(handle.fileno()).st_ino
    except FileNotFoundError:
        return False


def _lock_file(path: Path) -> IO[str] | None:
    """``path`` opened and exclusively locked, or ``None`` when another process holds it.

    A holder that ends removes the file while still holding its lock; a process that
    opened the old file meanwhile gets the lock of a removed file, sees it, and tries again
    on the new one. A lock that is busy is tried again for ``BUSY_RETRY_S``: another run's
    sweep of stale files ([`remove_stale_locks`][]) holds one for microseconds."""
    deadline = time.monotonic() + BUSY_RETRY_S
    for _ in range(1000):
        handle = open(path, "a+")  # noqa: SIM115 - held open: the lock is the open file
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            if time.monotonic() > deadline:
                return None
            time.sleep(0.02)
            continue
        if _same_file(path, handle):
            return handle
        fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
        handle.close()
    return None


def _holder(path: Path) -> str:
    """The text a lock's holder wrote into its file (pid, host, start time)."""
    try:
        return path.read_text().strip() or "another process"
    except OSError:
        return "another process"


__all__ = [
    "LOCK_SUFFIX", "RunFolderInUseError", "RunLock", "lock_path", "remove_stale_locks",
    "run_folders",
]  # fmt: skip
