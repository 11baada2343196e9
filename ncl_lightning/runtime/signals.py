"""Pre-emption: SIGTERM, SIGUSR1 and SIGINT save ``last.ckpt`` and exit ``128 + signal``
([`Preemption`][]; Lightning stops at the batch end but exits 0, so a pre-empted job would
look finished); [`StopWatchdog`][] ends a run that reaches no batch boundary in time.
Under DDP the ranks agree at each batch end whether any of them got a signal, so a signal
to one process (the launching one, say) stops them all at the same batch.
Details: ``docs/reliability.md``, "Pre-emption".
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import shlex
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from lightning.pytorch.utilities.exceptions import SIGTERMException

from ncl_lightning.foundation.errors import DiskFullError
from ncl_lightning.foundation.internals import stop_at_batch_end
from ncl_lightning.methods.record import run_folder
from ncl_lightning.runtime.runs import slurm_job

GRACE_ENV = "NCL_STOP_GRACE_S"
DEFAULT_GRACE_S = 10.0
WATCHED = frozenset({signal.SIGTERM, signal.SIGUSR1, signal.SIGINT})
REQUEUE_TIMEOUT_S = 60


class PreemptedError(SystemExit):
    """The run was stopped by a signal; its exit ``code`` is ``128 + signum`` (a
    ``SystemExit``: ``except Exception`` does not swallow it)."""

    def __init__(self, message: str, signum: int) -> None:
        super().__init__(128 + signum)
        self.message, self.signum = message, signum

    def __str__(self) -> str:
        return self.message


def grace_from_env(default: float = DEFAULT_GRACE_S) -> float:
    """``NCL_STOP_GRACE_S`` as seconds (> 0), else ``default``."""
    try:
        value = float(os.environ.get(GRACE_ENV, default))
    except ValueError:
        return default
    return value if value > 0 else default


def resume_command(argv: list[str] | None = None, run_id: str | None = None) -> str:
    """This command with ``--ckpt_path last`` and, when known, ``--run_id <id>`` (earlier
    ``--ckpt_path``/``--auto_resume``/``--run_id`` dropped)."""
    args = list(sys.argv if argv is None else argv)
    prog = "ncl-cli" if not args or Path(args[0]).name in ("ncl-cli", "cli.py") else args[0]
    flags = ("--ckpt_path", "--auto_resume", "--run_id")
    out, skip = [], False
    for arg in args[1:]:
        if not skip and arg not in flags and not arg.startswith(tuple(f"{f}=" for f in flags)):
            out.append(arg)
        skip = not skip and arg in flags
    run = ["--run_id", run_id] if run_id else []
    return shlex.join([prog, *out, *run, "--ckpt_path", "last"])


def requeue(job: str) -> str:
    """Run ``scontrol requeue <job>``; what happened, in words (a failure says how to go on)."""
    fallback = "; submit the job again: it resumes with --auto_resume true"
    try:
        done = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True,
                              timeout=REQUEUE_TIMEOUT_S, check=False)  # fmt: skip
    except (FileNotFoundError, subprocess.TimeoutExpired) as err:
        why = "not found" if isinstance(err, FileNotFoundError) else "gave no answer"
        return f"could not requeue SLURM job {job}: scontrol {why}{fallback}"
    if done.returncode != 0:
        why = (done.stderr or done.stdout).strip().splitlines()
        detail = f": {why[0]}" if why else ""
        return (
            f"could not requeue SLURM job {job} (scontrol exit {done.returncode}{detail}){fallback}"
        )
    return f"requeued SLURM job {job} (scontrol requeue {job})"


def last_checkpoint_path(trainer: L.Trainer) -> Path:
    """Where ``last.ckpt`` of ``trainer``'s run goes: the ``ModelCheckpoint`` folder, else
    ``<default_root_dir>/checkpoints``."""
    callback = trainer.checkpoint_callback
    folder = getattr(callback, "dirpath", None) or Path(trainer.default_root_dir) / "checkpoints"
    mc = callback if isinstance(callback, ModelCheckpoint) else ModelCheckpoint
    return Path(folder) / (mc.CHECKPOINT_NAME_LAST + mc.FILE_EXTENSION)


def on_disk(trainer: L.Trainer) -> str:
    """``the last checkpoint is <path> (step N); resume with: <command>``, or that none
    was written yet."""
    path = last_checkpoint_path(trainer)
    if not path.is_file():
        return "no checkpoint was written yet (a new run starts over)"
    try:  # memory-mapped: the tensors are not read
        ckpt = torch.load(path, map_location="cpu", mmap=True, weights_only=True)
        at = f" (step {int(ckpt['global_step'])})"
    except Exception:
        at = ""
    resume = resume_command(run_id=run_folder(path).name)
    return f"the last checkpoint is {path}{at}; resume with: {resume}"


def _flush(wait_s: float = 2.0) -> None:
    """Flush stdout/stderr from a helper thread (a stuck main thread may hold their lock)."""

    def flush() -> None:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()

    helper = threading.Thread(target=flush, daemon=True)
    helper.start()
    helper.join(wait_s)


def _end_children(wait_s: float = 2.0) -> None:
    """Terminate the ``multiprocessing`` children (loader workers), then kill the rest."""
    children = multiprocessing.active_children()
    for child in children:
        with contextlib.suppress(Exception):
            child.terminate()
    for child in children:
        with contextlib.suppress(Exception):
            child.join(wait_s / max(len(children), 1))
            if child.is_alive():
                child.kill()


class StopWatchdog:
    """Calls ``on_expiry(signum)`` when ``grace_s`` seconds pass after the first stop
    signal and [`stop`][] is not called first.

    ``start`` (main thread) has the C-level handler write signal numbers into a pipe a
    thread reads, so the signal is seen while the main thread is stuck in C;
    ``signal`` arms it from a Python-level handler too.
    """

    def __init__(self, grace_s: float, on_expiry: Callable[[int], None]) -> None:
        self.grace_s, self.on_expiry = grace_s, on_expiry
        self._lock, self._stopped = threading.Lock(), False
        self._timer: threading.Timer | None = None
        self._write_fd: int | None = None
        self._previous_fd = -1

    def start(self) -> None:
        read, write = os.pipe()
        os.set_blocking(write, False)
        try:
            self._previous_fd = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        except ValueError:  # not the main interpreter
            os.close(read)
            os.close(write)
            return
        self._write_fd = write
        threading.Thread(target=self._listen, args=(read,), daemon=True).start()

    def _listen(self, fd: int) -> None:
        with contextlib.suppress(OSError):
            while data := os.read(fd, 64):  # b"": the write end was closed (stopped)
                for signum in data:
                    if signum in WATCHED:
                        self.signal(signum)
        os.close(fd)

    def signal(self, signum: int) -> None:
        with self._lock:
            if self._timer is None and not self._stopped:
                self._timer = threading.Timer(self.grace_s, self.on_expiry, (signum,))
                self._timer.daemon = True
                self._timer.start()

    def stop(self) -> None:
        """The boundary came (or the run ended): never expire; give the wakeup fd back."""
        with self._lock:
            self._stopped = True
            if self._timer is not None:
                self._timer.cancel()
        if self._write_fd is None:
            return
        with contextlib.suppress(ValueError):
            signal.set_wakeup_fd(self._previous_fd)
        os.close(self._write_fd)  # the listener reads EOF and ends
        self._write_fd = None


class Preemption(Callback):
    """Save ``last.ckpt`` and exit ``128 + signum`` on SIGTERM, SIGUSR1 or SIGINT; the
    error is kept in ``stop`` and raised by ``ncl-cli`` after Lightning's teardown.

    Args:
        grace_s: Seconds a batch boundary may take after the signal; ``None``:
            ``NCL_STOP_GRACE_S`` or 10.
    """

    def __init__(self, grace_s: float | None = None) -> None:
        self.grace_s = grace_s
        self.signum: int | None = None
        self.stop: PreemptedError | None = None
        self._previous: dict[int, Any] = {}
        self._fit_trainer: L.Trainer | None = None
        self._watchdog: StopWatchdog | None = None

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.signum, self.stop, self._fit_trainer = None, None, trainer
        if threading.current_thread() is not threading.main_thread():
            rank_zero_warn(  # Python delivers signals to the main thread only
                "fit runs outside the main thread: SIGTERM and SIGUSR1 do not reach it, so a "
                "pre-emption signal will not save last.ckpt"
            )
            return
        grace = self.grace_s if self.grace_s is not None else grace_from_env()
        self._watchdog = StopWatchdog(grace, self._stuck)
        self._watchdog.start()
        self._take_signals(trainer)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.world_size > 1 and self._watchdog is not None:
            self._take_signals(trainer)  # over the handler Lightning installed since

    def _take_signals(self, trainer: L.Trainer) -> None:
        """One process: Lightning's SIGTERM handler (installed later, around this one) stops
        at the batch end; note the signal, and let SIGUSR1 stop the run the same way.
        Several: only note it, in place of Lightning's handler, which runs a collective
        inside the handler (it hangs when the other ranks are in another one); the ranks
        agree at the batch end ([`_agree`][])."""
        previous = signal.getsignal(signal.SIGTERM)
        alone = trainer.world_size == 1

        def on_term(num: int, frame: Any) -> None:
            self._note(num)
            if alone and callable(previous):
                previous(num, frame)

        def as_term(num: int, frame: Any) -> None:  # SIGUSR1: whatever handles SIGTERM now
            self._note(num)
            handler = signal.getsignal(signal.SIGTERM)  # Lightning's wraps on_term
            if alone and callable(handler):
                handler(signal.SIGTERM, frame)

        self._install(signal.SIGTERM, on_term)
        unused = signal.getsignal(signal.SIGUSR1) in (signal.SIG_DFL, None)
        if slurm_job() is not None or unused or signal.SIGUSR1 in self._previous:
            self._install(signal.SIGUSR1, as_term)

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        self._agree(trainer)

    def on_validation_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        if trainer.state.fn == "fit":
            self._agree(trainer)

    def _agree(self, trainer: L.Trainer) -> None:
        """Under DDP, have every rank stop at this batch when any rank got a signal (the
        largest signal number wins): one all-reduce of one number per batch."""
        if trainer.world_size == 1 or self._watchdog is None:
            return
        import torch.distributed as dist

        got = torch.tensor([self.signum or 0], device=trainer.strategy.root_device)
        dist.all_reduce(got, op=dist.ReduceOp.MAX)
        signum = int(got.item())
        if signum:
            self._note(signum)
            stop_at_batch_end(trainer)

    def _note(self, signum: int) -> None:
        self.signum = self.signum or signum
        if self._watchdog is not None:
            self._watchdog.signal(signum)

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

    def _stuck(self, signum: int) -> None:
        """No boundary within the grace period (watchdog thread): say what is on disk, end
        the loader workers, exit without saving (the main thread may be mid-step)."""
        trainer = self._fit_trainer
        grace = self._watchdog.grace_s if self._watchdog is not None else 0.0
        with contextlib.suppress(Exception):
            if trainer is not None and trainer.is_global_zero:
                message = (
                    f"stopped by {signal.Signals(signum).name} at step {trainer.global_step} "
                    f"(epoch {trainer.current_epoch + 1}): no batch boundary within {grace:g} s (a "
                    "training step, a validation hook or a data loader worker is stuck), so "
                    f"nothing was saved now; {on_disk(trainer)}"
                )
                _flush()
                os.write(2, f"ncl-cli: {message}\n".encode())
        _end_children()
        _flush()
        os._exit(128 + signum)

    def on_exception(
        self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException
    ) -> None:
        """Save ``last.ckpt`` when Lightning stopped on a signal (every rank calls it)."""
        self._stop_watchdog()  # the main thread is back: the save may take its time
        if isinstance(exception, SIGTERMException):
            signum = self.signum or signal.SIGTERM
        elif isinstance(exception, KeyboardInterrupt) and trainer.world_size == 1:
            signum = signal.SIGINT  # under DDP only this rank was interrupted: no save
        else:
            return
        self._restore()
        name = signal.Signals(signum).name
        if trainer.state.fn != "fit" or trainer.global_step == 0:
            self.stop = PreemptedError(f"stopped by {name} before any training step", signum)
            return
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        # epochs counted from 1, as the console's epoch lines count them
        where = f"at step {trainer.global_step} (epoch {trainer.current_epoch + 1})"
        path = last_checkpoint_path(trainer)
        try:
            trainer.save_checkpoint(path, weights_only=False)  # collective: rank 0 writes
        except DiskFullError as err:  # still a pre-empted run: say what is on disk
            message = f"stopped by {name} {where}; not saved: {err}; {on_disk(trainer)}"
        else:
            job, requeued = slurm_job(), ""
            if signum == signal.SIGUSR1 and job is not None and trainer.is_global_zero:
                requeued = f"{requeue(job)}; "
            resume = resume_command(run_id=run_folder(path).name)
            message = f"stopped by {name} {where}; saved {path}; {requeued}resume with: {resume}"
        finally:
            signal.signal(signal.SIGINT, previous)
        rank_zero_info(f"ncl-cli: {message}")
        self.stop = PreemptedError(message, int(signum))
