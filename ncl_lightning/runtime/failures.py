"""How a run that fails while it works ends: a file taken away mid-run is a fault (exit 1,
not 2), and a run of several processes stops with the error of the process that failed,
not the tracebacks of the others.

Lightning's ``ddp`` launcher starts ranks 1, 2, ... as children of the command the user ran
(rank 0). When one rank stops on an error (a corrupt image in its shard, say), the others
fail in their next collective ("connection closed by peer") and print that traceback, and
the launching process exits 1 whatever the cause. [`FailedRun`][] decides instead:

* on the launching process, when a rank it started has ended with a non-zero status: one
  line ``rank <r> ended with exit status <s> (its error is above); the run stopped`` and
  exit status ``<s>`` (2 for bad input);
* on a started rank, when the launching process has ended: nothing more (its own line says
  why), exit status 1.

"While it works" starts with the first batch of any loop: an ``OSError`` before it (a
DataModule's ``setup`` reading a path) is the input's, status 2 as before.

An error of ours, a signal and a run of one process keep their own ending. Under
``torchrun`` or SLURM, which start every rank themselves (and end the others when one
fails), the tracebacks stay. Lightning's launcher also kills the launching process when a
rank it started fails (it looks every 5 s); in that rare race the command ends with 137.
"""

from __future__ import annotations

import os
import time

import lightning as L
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities.exceptions import SIGTERMException

from ncl_lightning.foundation.errors import RunFaultError
from ncl_lightning.foundation.internals import launched_processes
from ncl_lightning.runtime.errors import error_message, ours

#: Seconds to wait for the process that made another rank fail to end.
WAIT_S = 30.0


class RankEndedError(SystemExit):
    """This rank stopped because another one ended; its exit ``code`` is that rank's status
    (1 on a started rank whose launching process ended)."""


class FailedRun(Callback):
    """Decide how a run that raised while the trainer worked ends; ``ncl-cli`` raises
    [`ending`][] after Lightning's teardown.

    Args:
        wait_s: Seconds to wait for the failed process to end (its sockets close just
            before it does).
    """

    def __init__(self, wait_s: float = WAIT_S) -> None:
        self.wait_s = wait_s
        self.failed = False  # raised after the first batch began: the run was working
        self.ended: RankEndedError | None = None
        self._working = False
        self._parent = os.getppid()

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self.failed, self.ended, self._working, self._parent = False, None, False, os.getppid()

    def _batch_began(self, *args: object) -> None:
        self._working = True

    # A batch of any loop began: what fails from now on fails while the run works (a
    # DataModule's setup, before any batch, is still reading its input).
    on_train_batch_start = on_validation_batch_start = _batch_began
    on_test_batch_start = on_predict_batch_start = _batch_began

    def on_exception(
        self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException
    ) -> None:
        self.failed = self._working
        if (
            trainer.world_size > 1
            and ours(exception) is None
            and not isinstance(exception, SIGTERMException | KeyboardInterrupt)
        ):
            self.ended = self._other_rank(trainer)

    def ending(self, error: Exception) -> BaseException | None:
        """What ``ncl-cli`` raises in place of ``error`` (raised by the trainer's work), or
        ``None`` to keep it: the other rank's status, or a file the run lost (a fault)."""
        if self.ended is not None:
            return self.ended
        lost = isinstance(error, OSError) and error.filename is not None
        if self.failed and lost and ours(error) is None:
            message = error_message(error)
            return RunFaultError(
                f"{message}; the run stopped: a file it works with became unusable while it "
                "ran (deleted, moved or unmounted)"
            )
        return None

    def _other_rank(self, trainer: L.Trainer) -> RankEndedError | None:
        """Wait for the rank whose failure made this one fail, when Lightning's launcher
        started them; ``None`` when none ended in time (this rank's error is its own)."""
        children = launched_processes(trainer)
        started = not children and os.environ.get("LOCAL_RANK", "0") != "0"
        if not children and not started:  # a rank that torchrun or SLURM started
            return None
        deadline = time.monotonic() + self.wait_s
        while time.monotonic() < deadline:
            if started and os.getppid() != self._parent:  # the launching process ended
                return RankEndedError(1)
            for rank, child in enumerate(children, start=1):
                if child.poll():
                    code = int(child.returncode)  # -n: killed by signal n
                    how = f"exit status {code}" if code > 0 else f"signal {-code}"
                    os.write(2, f"ncl-cli: error: rank {rank} ended with {how} (its error is "
                                "above); the run stopped\n".encode())  # fmt: skip
                    return RankEndedError(code if code > 0 else 128 - code)
            time.sleep(0.05)
        return None
