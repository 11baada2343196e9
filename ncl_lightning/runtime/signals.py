"""Pre-emption: SIGTERM, SIGUSR1 and SIGINT save ``last.ckpt`` and exit non-zero.

A cluster scheduler ends a job with SIGTERM (SLURM's ``--signal`` may send SIGUSR1
first). Lightning notices SIGTERM at the end of the running batch and then exits with
status 0, so a pre-empted job looks finished and is never requeued. With the
[`Preemption`][] callback the run instead

1. saves ``last.ckpt`` (in the ``ModelCheckpoint`` folder, else
   ``<default_root_dir>/checkpoints``) at that batch boundary, every rank agreeing;
2. prints the command that resumes it (``--ckpt_path last``);
3. exits with ``128 + signal number`` (143 for SIGTERM, 138 for SIGUSR1, 130 for
   SIGINT), as a shell reports a process ended by that signal.

SIGUSR1 is treated as SIGTERM unless a handler is already installed for it. Under a
SLURM batch job (``sbatch --signal=USR1@<seconds>``) the callback owns SIGUSR1, in place
of Lightning's auto-requeue handler (which saves ``hpc_ckpt_N.ckpt`` into the
``default_root_dir`` that every run of a root shares, where a sibling array task would
resume it): it saves ``last.ckpt`` in the run's own folder, requeues the job with
``scontrol requeue <job>`` (rank zero) and exits 138. The requeued job keeps its job id,
hence its run id (``slurm-<job>``), and ``--auto_resume true`` resumes exactly that run.
A second signal while saving is ignored.

When no batch boundary comes within a grace period after the signal (a loader worker
hangs, a step or a validation hook runs for minutes, a collective waits for a rank that
is gone), [`StopWatchdog`][ncl_lightning.runtime.watchdog.StopWatchdog] ends the run anyway:
nothing is saved at that point (it would mix two steps), the line names the checkpoint
already on disk and the command that resumes it, the loader workers are terminated and
the exit status is ``128 + signal`` all the same. The grace period is
``NCL_STOP_GRACE_S`` seconds (default 10).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.utilities import rank_zero_info
from lightning.pytorch.utilities.exceptions import SIGTERMException

from ncl_lightning.foundation.disk import remove_stale
from ncl_lightning.foundation.errors import DiskFullError
from ncl_lightning.runtime.runs import run_folder_of, slurm_job
from ncl_lightning.runtime.watchdog import StopWatchdog, end_children, flush_output, grace_from_env

REQUEUE_TIMEOUT_S = 60


class PreemptedError(SystemExit):
    """The run was stopped by a signal (after saving ``last.ckpt``); its exit ``code`` is
    ``128 + signum``. A ``SystemExit``, so ``except Exception`` does not swallow it."""

    def __init__(self, message: str, signum: int) -> None:
        super().__init__(128 + signum)
        self.message = message
        self.signum = signum

    def __str__(self) -> str:
        return self.message


def last_checkpoint_path(trainer: L.Trainer) -> Path:
    """Where ``last.ckpt`` of ``trainer``'s run goes: the ``ModelCheckpoint`` folder, else
    ``<default_root_dir>/checkpoints``."""
    callback = trainer.checkpoint_callback
    folder = getattr(callback, "dirpath", None) if callback is not None else None
    name = ModelCheckpoint.CHECKPOINT_NAME_LAST + ModelCheckpoint.FILE_EXTENSION
    if isinstance(callback, ModelCheckpoint):
        name = callback.CHECKPOINT_NAME_LAST + callback.FILE_EXTENSION
    return Path(folder or Path(trainer.default_root_dir) / "checkpoints") / name


def resume_command(argv: list[str] | None = None, run_id: str | None = None) -> str:
    """The command line that resumes this run: the same arguments with ``--ckpt_path
    last`` and, when known, ``--run_id <id>`` (earlier ``--ckpt_path``/``--auto_resume``/
    ``--run_id`` are dropped)."""
    args = list(sys.argv if argv is None else argv)
    prog = "ncl-cli" if not args or Path(args[0]).name in ("ncl-cli", "cli.py") else args[0]
    out, skip = [], False
    for arg in args[1:]:
        if skip:
            skip = False
            continue
        if arg in ("--ckpt_path", "--auto_resume", "--run_id"):
            skip = True
            continue
        if arg.startswith(("--ckpt_path=", "--auto_resume=", "--run_id=")):
            continue
        out.append(arg)
    run = ["--run_id", run_id] if run_id else []
    return shlex.join([prog, *out, *run, "--ckpt_path", "last"])


def requeue(job: str) -> str:
    """Run ``scontrol requeue <job>``; what happened, in words for the log (a failure says
    how to go on: nothing is lost, the job only has to be submitted again)."""
    fallback = "; submit the job again: it resumes with --auto_resume true"
    try:
        done = subprocess.run(
            ["scontrol", "requeue", job],
            capture_output=True, text=True, timeout=REQUEUE_TIMEOUT_S, check=False,
        )  # fmt: skip
    except FileNotFoundError:
        return f"could not requeue SLURM job {job}: scontrol not found{fallback}"
    except subprocess.TimeoutExpired:
        return f"could not requeue SLURM job {job}: scontrol gave no answer{fallback}"
    if done.returncode != 0:
        why = (done.stderr or done.stdout).strip().splitlines()
        detail = f": {why[0]}" if why else ""
        code = done.returncode
        return f"could not requeue SLURM job {job} (scontrol exit {code}{detail}){fallback}"
    return f"requeued SLURM job {job} (scontrol requeue {job})"


def checkpoint_step(path: Path) -> int | None:
    """The ``global_step`` recorded in checkpoint ``path`` (memory-mapped: the tensors are
    not read), or ``None`` when it cannot be read."""
    try:
        ckpt = torch.load(path, map_location="cpu", mmap=True, weights_only=True)
        return int(ckpt["global_step"])
    except Exception:
        return None


class Preemption(Callback):
    """Save ``last.ckpt`` and exit ``128 + signum`` on SIGTERM, SIGUSR1 or SIGINT.

    The checkpoint is written at the batch boundary where Lightning stops (the end of the
    running batch); resuming it with ``--ckpt_path last`` continues from that step. When
    no boundary comes within ``grace_s`` seconds the run ends without saving (see the
    module docstring).

    Args:
        grace_s: Seconds a batch boundary may take after the signal; ``None``:
            ``NCL_STOP_GRACE_S`` or 10.
    """

    def __init__(self, grace_s: float | None = None) -> None:
        self.signum: int | None = None
        self.stop: PreemptedError | None = None
        self._previous: dict[int, Any] = {}
        self.grace_s = grace_s
        self._running_trainer: L.Trainer | None = None
        self._watchdog: StopWatchdog | None = None

    # -- signal handlers ------------------------------------------------------------
    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.signum, self.stop, self._running_trainer = None, None, trainer
        grace = self.grace_s if self.grace_s is not None else grace_from_env()
        self._watchdog = StopWatchdog(grace, self._stuck)
        self._watchdog.start()
        if trainer.is_global_zero:  # temporary files of a writer killed in an earlier run
            folders = {last_checkpoint_path(trainer).parent}
            folders |= {Path(c.dirpath) for c in trainer.checkpoint_callbacks if c.dirpath}
            for folder in folders:
                remove_stale(folder)
        # Lightning has installed its SIGTERM handler (it stops at the batch end); note
        # which signal arrived, and let SIGUSR1 stop the run the same way.
        self._hook(signal.SIGTERM)
        if slurm_job() is not None or signal.getsignal(signal.SIGUSR1) in (signal.SIG_DFL, None):
            self._install(signal.SIGUSR1, self._as_sigterm)  # under SLURM: in Lightning's place

    def _hook(self, signum: int) -> None:
        previous = signal.getsignal(signum)

        def handler(num: int, frame: Any) -> None:
            self.signum = self.signum or num
            if self._watchdog is not None:
                self._watchdog.signal(num)
            if callable(previous):
                previous(num, frame)

        self._install(signum, handler)

    def _as_sigterm(self, num: int, frame: Any) -> None:
        self.signum = self.signum or num
        if self._watchdog is not None:
            self._watchdog.signal(num)
        handler = signal.getsignal(signal.SIGTERM)  # Lightning's, wrapped by _hook
        if callable(handler):
            handler(signal.SIGTERM, frame)

    def _install(self, signum: int, handler: Any) -> None:
        self._previous.setdefault(signum, signal.getsignal(signum))
        signal.signal(signum, handler)

    def _restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        self._previous.clear()

    def _stop_watchdog(self) -> None:
        if self._watchdog is not None:
            self._watchdog.stop()
            self._watchdog = None

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._stop_watchdog()
        self._restore()

    # -- no boundary within the grace period ----------------------------------------
    def _stuck(self, signum: int) -> None:
        """The watchdog's end (its thread): say what is on disk, end the loader workers,
        exit ``128 + signum`` without saving (the main thread may be mid-step)."""
        trainer, name = self._running_trainer, signal.Signals(signum).name
        grace = self._watchdog.grace_s if self._watchdog is not None else 0.0
        with contextlib.suppress(Exception):
            if trainer is not None and trainer.is_global_zero:
                message = stuck_message(trainer, name, grace)
                flush_output()
                os.write(2, f"ncl-cli: {message}\n".encode())
        end_children()
        flush_output()
        os._exit(128 + signum)

    # -- the stop -------------------------------------------------------------------
    def on_exception(
        self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException
    ) -> None:
        """Save ``last.ckpt`` when Lightning stops on a signal; the error is kept in
        ``stop`` (Lightning finishes its teardown, then ``ncl-cli`` raises it)."""
        self._stop_watchdog()  # the main thread is back: the save below may take its time
        if isinstance(exception, SIGTERMException):
            signum = self.signum or signal.SIGTERM
        elif isinstance(exception, KeyboardInterrupt):
            signum = signal.SIGINT
            if trainer.world_size > 1:
                return  # only this rank was interrupted: a collective save would hang
        else:
            return
        self._restore()
        name = signal.Signals(signum).name
        if trainer.state.fn != "fit" or trainer.global_step == 0:
            self.stop = PreemptedError(f"stopped by {name} before any training step", signum)
            return
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        where = f"at step {trainer.global_step} (epoch {trainer.current_epoch})"
        path = last_checkpoint_path(trainer)
        try:
            trainer.save_checkpoint(path)  # collective: every rank calls it, rank 0 writes
        except DiskFullError as err:  # still a pre-empted run: say what is on disk
            message = f"stopped by {name} {where}; not saved: {err}; {on_disk(trainer)}"
            rank_zero_info(f"ncl-cli: {message}")
            self.stop = PreemptedError(message, int(signum))
            return
        finally:
            signal.signal(signal.SIGINT, previous)
        job = slurm_job()
        requeued = ""
        if signum == signal.SIGUSR1 and job is not None and trainer.is_global_zero:
            requeued = f"{requeue(job)}; "
        message = (
            f"stopped by {name} {where}; saved {path}; {requeued}resume with: "
            f"{resume_command(run_id=run_folder_of(path).name)}"
        )
        rank_zero_info(f"ncl-cli: {message}")
        self.stop = PreemptedError(message, int(signum))


def on_disk(trainer: L.Trainer) -> str:
    """``the last checkpoint is <path> (step N); resume with: <command>``, or that none
    was written yet."""
    path = last_checkpoint_path(trainer)
    if not path.is_file():
        return "no checkpoint was written yet (a new run starts over)"
    step = checkpoint_step(path)
    at = f" (step {step})" if step is not None else ""
    resume = resume_command(run_id=run_folder_of(path).name)
    return f"the last checkpoint is {path}{at}; resume with: {resume}"


def stuck_message(trainer: L.Trainer, name: str, grace_s: float) -> str:
    """The line for a run ended by the watchdog: where it was, that nothing was saved
    now, and the checkpoint on disk with the command that resumes it."""
    where = f"at step {trainer.global_step} (epoch {trainer.current_epoch})"
    return (
        f"stopped by {name} {where}: no batch boundary within {grace_s:g} s (a training "
        "step, a validation hook or a data loader worker is stuck), so nothing was saved "
        f"now; {on_disk(trainer)}"
    )


__all__ = [
    "PreemptedError",
    "Preemption",
    "checkpoint_step",
    "last_checkpoint_path",
    "on_disk",
    "resume_command",
    "stuck_message",
]
