"""A stop signal that finds no batch boundary still ends the run, within seconds.

Lightning acts on SIGTERM only at a batch boundary (the end of a training or validation
batch), where [`Preemption`][ncl_lightning.runtime.signals.Preemption] saves ``last.ckpt``. A
boundary may never come: a loader worker hangs (a file on a dead network mount), a step
blocks in a collective waiting for a rank that is gone, a step or a hook runs for
minutes. [`StopWatchdog`][] then ends the process once ``grace_s`` seconds have
passed since the signal: nothing is saved at that point (the model may be half-way
through an optimiser step; a checkpoint written from another thread could mix two
steps), the callback says which checkpoint is already on disk, the loader workers are
terminated and the process exits ``128 + signum``, as a shell reports a process ended by
that signal.

The signal is seen even when the main thread never returns to Python (a C++ call that
does not return, where Python's own handlers cannot run): ``signal.set_wakeup_fd``
makes the C-level handler write the signal number into a pipe a watchdog thread reads.
The grace period is ``NCL_STOP_GRACE_S`` (seconds, default ``DEFAULT_GRACE_S``).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import sys
import threading
from collections.abc import Callable

GRACE_ENV = "NCL_STOP_GRACE_S"
DEFAULT_GRACE_S = 10.0
WATCHED = frozenset({signal.SIGTERM, signal.SIGUSR1, signal.SIGINT})
CHILD_WAIT_S = 2.0


def grace_from_env(default: float = DEFAULT_GRACE_S) -> float:
    """``NCL_STOP_GRACE_S`` as seconds (> 0), else ``default``."""
    try:
        value = float(os.environ.get(GRACE_ENV, default))
    except ValueError:
        return default
    return value if value > 0 else default


def end_children(wait_s: float = CHILD_WAIT_S) -> None:
    """Terminate this process's ``multiprocessing`` children (DataLoader workers): SIGTERM,
    then SIGKILL for those still alive after ``wait_s``."""
    children = multiprocessing.active_children()
    for child in children:
        with contextlib.suppress(Exception):
            child.terminate()
    for child in children:
        with contextlib.suppress(Exception):
            child.join(wait_s / max(len(children), 1))
    for child in children:
        with contextlib.suppress(Exception):
            if child.is_alive():
                child.kill()


def flush_output(wait_s: float = 2.0) -> None:
    """Flush ``sys.stdout``/``sys.stderr`` from a helper thread (a main thread stuck in a
    write may hold their lock; then give up after ``wait_s``)."""

    def flush() -> None:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()

    helper = threading.Thread(target=flush, daemon=True)
    helper.start()
    helper.join(wait_s)


class StopWatchdog:
    """Calls ``on_expiry(signum)`` when ``grace_s`` seconds pass after a stop signal
    without [`disarm`][].

    Args:
        grace_s: Seconds a batch boundary may take to come.
        on_expiry: What ends the run (it should not return: it exits the process).
    """

    def __init__(self, grace_s: float, on_expiry: Callable[[int], None]) -> None:
        self.grace_s, self.on_expiry = grace_s, on_expiry
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._armed = False
        self._pipe: tuple[int, int] | None = None
        self._previous_fd: int | None = None

    def start(self) -> None:
        """Start listening (call from the main thread; elsewhere only [`signal`][],
        called by the Python-level handlers, arms it)."""
        self._done.clear()
        self._armed = False
        if threading.current_thread() is not threading.main_thread() or self._pipe:
            return
        read, write = os.pipe()
        os.set_blocking(write, False)
        try:
            self._previous_fd = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        except ValueError:  # not the main thread of the main interpreter
            os.close(read)
            os.close(write)
            return
        self._pipe = (read, write)
        threading.Thread(target=self._listen, args=(read,), daemon=True).start()

    def _listen(self, fd: int) -> None:
        try:
            while data := os.read(fd, 64):  # b"": the write end was closed (stopped)
                for signum in data:
                    if signum in WATCHED:
                        self.signal(signum)
        except OSError:
            pass
        finally:
            os.close(fd)

    def signal(self, signum: int) -> None:
        """A stop signal arrived: end the run unless [`disarm`][] comes within the grace
        period (only the first signal counts)."""
        with self._lock:
            if self._armed or self._done.is_set():
                return
            self._armed = True
        threading.Thread(target=self._expire, args=(signum,), daemon=True).start()

    def _expire(self, signum: int) -> None:
        if not self._done.wait(self.grace_s):
            self.on_expiry(signum)

    def disarm(self) -> None:
        """The boundary came (or the run ended): never call ``on_expiry``."""
        self._done.set()

    def stop(self) -> None:
        """Disarm and give the wakeup fd back (main thread)."""
        self.disarm()
        if self._pipe is None:
            return
        _, write = self._pipe
        self._pipe = None
        with contextlib.suppress(ValueError):
            signal.set_wakeup_fd(self._previous_fd if self._previous_fd is not None else -1)
        os.close(write)  # the listener reads EOF, closes its end and ends


__all__ = [
    "DEFAULT_GRACE_S",
    "GRACE_ENV",
    "StopWatchdog",
    "end_children",
    "flush_output",
    "grace_from_env",
]
