"""The one way the studies run their ``ncl-cli`` runs: reuse, run, announce, collect.

[`run_jobs`][] reads back the records of the jobs done before (so an interrupted study
resumes) and runs the rest, here or in a pool, each on a ``[run k/N]`` progress line. Pure
Python at import: Lightning is imported by [`cli_here`][] only.
"""

from __future__ import annotations

import hashlib
import json
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Executor, as_completed
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, TypeVar

from ncl_lightning.foundation.disk import atomic_write
from ncl_lightning.foundation.errors import ConfigError, RunFailedError
from ncl_lightning.foundation.progress import QUIET_TRAINER_ARGS, Progress, quiet_lightning

J = TypeVar("J")  # a job
R = TypeVar("R")  # its record


def slug(name: str) -> str:
    """A folder name of a row or variant name: lower case, ``_`` for anything else."""
    return "".join(c if c.isalnum() else "_" for c in name.lower()).strip("_")


def folder_args(root: Path, logs: bool = False, verbose: bool = False) -> list[str]:
    """``ncl-cli`` arguments putting a run's output under ``root`` (``default_root_dir``;
    ``logs``: the logger writes ``<root>/logs/version_0``, a fixed place to read back);
    the progress bar and model summary off unless ``verbose``."""
    args = ["--trainer.default_root_dir", str(root)]
    if logs:
        args += ["--trainer.logger.init_args.name", "logs"]
        args += ["--trainer.logger.init_args.version", "0"]
    return args + ([] if verbose else list(QUIET_TRAINER_ARGS))


def fresh_attempt(root: Path) -> None:
    """Before a run into ``root`` (its logger at ``<root>/logs/version_0``, see
    [`folder_args`][]): an earlier unfinished attempt's ``logs`` is kept aside as
    ``logs.unfinished-<k>``, never continued or read, so the run starts in a fresh folder."""
    logs = root / "logs"
    if logs.exists():
        k = 1 + sum(1 for _ in root.glob("logs.unfinished-*"))
        logs.rename(root / f"logs.unfinished-{k}")


def write_record(result_file: Path, record: dict) -> None:
    """Write a finished job's record whole or not at all (a kill leaves no cut file)."""
    with atomic_write(result_file) as f:
        f.write(json.dumps(record).encode())


STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)  # what a scheduler sends the study's pid
_RUNNING: set[subprocess.Popen] = set()
_STOPPED: list[int] = []


def run_child(command: Sequence[str], log: IO, env: Mapping[str, str]) -> int:
    """Run one ``ncl-cli`` process to its end, its output into ``log``; its exit status.
    Under [`forward_stops`][], a stop signal the study gets reaches it (it saves and ends
    as any run does), and none starts once the study was stopped.

    Raises:
        RunFailedError: The study was stopped before this process started.
    """
    if _STOPPED:
        name = signal.Signals(_STOPPED[0]).name
        raise RunFailedError(f"not started: the study was stopped by {name}")
    proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=dict(env))
    _RUNNING.add(proc)
    try:
        if _STOPPED:  # the signal came as it started
            proc.send_signal(_STOPPED[0])
        return proc.wait()
    finally:
        _RUNNING.discard(proc)


@contextmanager
def forward_stops() -> Iterator[None]:
    """While a study runs (from the main thread): ``SIGTERM``/``SIGUSR1`` to the study go on
    to its running ``ncl-cli`` processes, and no new one starts (else the study died and its
    cells trained on, unseen)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def forward(signum: int, frame: object) -> None:
        _STOPPED.append(signum)
        for proc in list(_RUNNING):
            proc.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        _STOPPED.clear()


def cli_here(args: Sequence[str], verbose: bool = False) -> Any:
    """Run ``ncl-cli`` in this process (Lightning's banners off unless ``verbose``);
    returns the finished LightningCLI."""
    from ncl_lightning.runtime.cli import cli_main  # Lightning: seconds to import

    with quiet_lightning(verbose):
        return cli_main(list(args))


def fingerprint(args: Sequence[str], out: Path | str) -> str:
    """What makes a job's result: its ``ncl-cli`` arguments (but the console's quiet
    switches; paths under the study's ``out`` relative to it, so a study moved whole keeps
    its results) and the text of every ``--config`` file they name, wherever it lies (a
    sha256 hex digest)."""
    digest = hashlib.sha256()
    args = [a for a in args if a not in QUIET_TRAINER_ARGS]
    for before, arg in zip(["", *args], args, strict=False):
        config = arg if before == "--config" else None
        config = arg.removeprefix("--config=") if arg.startswith("--config=") else config
        if config is not None and Path(config).is_file():
            digest.update(b"config:" + Path(config).read_bytes() + b"\0")
        else:
            digest.update(arg.replace(str(out), "<out>").encode() + b"\0")
    return digest.hexdigest()


def earlier_record(result_file: Path, made_by: str) -> dict | None:
    """The record a job wrote to ``result_file`` when it finished, or ``None`` (not yet).

    Args:
        result_file: The job's record.
        made_by: This job's [`fingerprint`][]: a record made otherwise is never reused.

    Raises:
        ConfigError: The record is not readable, or another config or argument made it.
    """
    if not result_file.exists():
        return None
    try:
        record = json.loads(result_file.read_text())
    except (OSError, ValueError) as err:
        raise ConfigError(
            f"{result_file}: unreadable record ({err}); delete it to run that job again",
            key="out",
        ) from None
    if record.get("fingerprint") != made_by:
        raise ConfigError(
            f"{result_file.parent}: finished with another config or other arguments than "
            "this study gives it now; use a new --out, or delete that folder to run it again",
            key="out",
        )
    return record


def run_jobs(
    jobs: Sequence[J],
    run: Callable[[J], R],
    describe: Callable[[J], str],
    earlier: Callable[[J], R | None],
    *,
    progress: Progress | None = None,
    workers: int = 1,
    pool: Callable[[int], Executor] | None = None,
    ended: Callable[[J, R], str] | None = None,
    units: Callable[[J], int] = lambda job: 1,
    reason: str = "reused",
    announce: bool = True,
) -> list[R]:
    """Every job's record, in the order of ``jobs``: read back, or made by ``run``.

    Args:
        jobs: What to run.
        run: Makes one job's record (in a process ``pool``: a picklable function).
        describe: The job on its progress lines.
        earlier: The record of a job finished before (``None``: run it).
        progress: Where the jobs are announced (a given one is left for its owner to
            finish); default a new ``[run k/N]`` progress of ``units`` over the jobs.
        workers: Jobs at once in ``pool``.
        pool: ``pool(workers)`` is the executor the jobs run in, each announced when it
            ends; a failed job's error is raised once every other job has ended. ``None``:
            one after another here, each announced as it starts and ends.
        ended: The description of a job's end line in a pool (default ``describe``).
        units: Progress units of one job (a chain of runs).
        reason: What the line of a job done before says.
        announce: Announce each job run here (``False``: ``run`` announces its own).
    """
    own = progress is None
    if progress is None:
        progress = Progress(sum(units(job) for job in jobs), "run")
    records: dict[int, R] = {}
    todo = []
    for i, job in enumerate(jobs):
        record = earlier(job)
        if record is None:
            todo.append(i)
            continue
        records[i] = record
        for _ in range(units(job)):
            progress.skip(describe(job), reason)
    if pool is None:
        for i in todo:
            if announce:
                with progress.unit(describe(jobs[i])):
                    records[i] = run(jobs[i])
            else:
                records[i] = run(jobs[i])
    elif todo:
        failed: dict[int, BaseException] = {}
        with pool(workers) as executor:
            futures = {executor.submit(run, jobs[i]): i for i in todo}
            for future in as_completed(futures):
                i = futures[future]
                if (error := future.exception()) is not None:
                    failed[i] = error
                    continue
                records[i] = future.result()
                progress.end(describe(jobs[i]) if ended is None else ended(jobs[i], records[i]))
        if failed:  # every other job has ended (and kept its record): the first one's error
            raise failed[min(failed)]
    if own:
        progress.finish()
    return [records[i] for i in range(len(jobs))]
