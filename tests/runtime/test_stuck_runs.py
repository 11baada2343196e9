"""A stop signal ends a run within seconds even when no batch boundary comes: a loader
worker that hangs, a main thread stuck in Python or in a call that never returns.

Regression: Lightning acts on SIGTERM only at the end of a batch, so a run whose loader
hung ignored SIGTERM/SIGUSR1 until the scheduler's SIGKILL (no line, no status).
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from pathlib import Path

import pytest
import torch
from torch.utils.data import Dataset

from ncl_lightning.data import DigitsDataModule
from ncl_lightning.runtime.signals import StopWatchdog, grace_from_env
from tests.resume_helpers import output_of
from tests.runtime.test_signals import digits_config, start

GRACE_S = 3
STEPS = 4  # training batches an epoch (of the digits' 23 of 64)


class Hanging(Dataset):
    """The first ``items`` items of ``dataset`` until ``trigger`` (default: ``hang_file``)
    exists; then each process that reads one writes ``<hang_file>.<pid>`` and never returns
    (``mode``: ``sleep``, Python sleeping with signals delivered; ``blocked``, SIGTERM/SIGUSR1
    blocked in this thread, as in a C call that never comes back to Python).

    ``items`` whole batches make an epoch that ends with its last batch: no loader worker
    is still reading batches prefetched beyond it when the trigger appears (it would hang
    there, before the next epoch starts, and the other worker never would)."""

    def __init__(
        self, dataset: Dataset, hang_file: str, mode: str, trigger: str = "", items: int = 0
    ) -> None:
        self.dataset, self.hang_file, self.mode = dataset, hang_file, mode
        self.trigger = trigger or hang_file
        self.items = min(items or len(dataset), len(dataset))  # type: ignore[arg-type]

    def __len__(self) -> int:
        return self.items

    def __getitem__(self, index: int):
        if self.trigger and os.path.exists(self.trigger):
            if self.mode == "blocked":
                signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGUSR1})
            Path(f"{self.hang_file}.{os.getpid()}").write_text("hung")
            while True:
                time.sleep(3600)
        return self.dataset[index]


class HangingDigits(DigitsDataModule):
    """The digits, whose training items hang once ``trigger`` (default: ``hang_file``) exists."""

    def __init__(
        self, hang_file: str = "", mode: str = "sleep", trigger: str = "", **kwargs
    ) -> None:
        super().__init__(**kwargs)
        self.hang_file, self.mode, self.trigger = hang_file, mode, trigger

    def build_split(self, split):
        dataset = super().build_split(split)
        if split != "train":
            return dataset
        items = STEPS * self.batch_size
        return Hanging(dataset, self.hang_file, self.mode, self.trigger, items)


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "State:\tZ" not in state


@pytest.mark.slow
@pytest.mark.parametrize(
    ("signum", "workers", "mode"),
    [(signal.SIGTERM, 2, "sleep"),  # every loader worker hangs
     (signal.SIGUSR1, 0, "sleep"),  # the main thread hangs in Python
     (signal.SIGTERM, 0, "blocked")],  # the main thread never runs Python's handlers
)  # fmt: skip
def test_signal_ends_a_stuck_run(
    tmp_path: Path, monkeypatch, signum: int, workers: int, mode: str
) -> None:
    run, hang = tmp_path / "run", tmp_path / "hang"
    last = run / "digits" / "version_0" / "checkpoints" / "last.ckpt"
    config = digits_config(run, max_epochs=3, workers=workers)
    config["trainer"].update(limit_train_batches=STEPS, limit_val_batches=1)
    config["data"]["class_path"] = "tests.runtime.test_stuck_runs.HangingDigits"
    # the training items hang from the first of epoch 1 on: once epoch 0 is done and saved
    config["data"]["init_args"].update(hang_file=str(hang), mode=mode, trigger=str(last))
    monkeypatch.setenv("NCL_STOP_GRACE_S", str(GRACE_S))
    proc = start(config, tmp_path / "run.yaml")
    expected = max(workers, 1)
    deadline = time.monotonic() + 300  # started, epoch 0 done and saved, then hung
    while len(list(tmp_path.glob("hang.*"))) < expected:
        assert proc.poll() is None and time.monotonic() < deadline, output_of(proc)
        time.sleep(0.05)
    time.sleep(1.0)  # the batches already fetched are used up: no boundary comes now
    hung = [int(p.suffix[1:]) for p in tmp_path.glob("hang.*")]
    sent = time.monotonic()
    proc.send_signal(signum)
    out, _ = proc.communicate(timeout=120)
    took = time.monotonic() - sent
    assert proc.returncode == 128 + signum, out[-3000:]
    assert GRACE_S - 0.5 < took < GRACE_S + 30, took
    lines = [line for line in out.splitlines() if line.startswith("ncl-cli:")]
    assert len(lines) == 1 and "Traceback" not in out, out[-3000:]
    step = STEPS
    assert torch.load(last, weights_only=True)["global_step"] == step  # saved after epoch 0
    name = signal.Signals(signum).name
    found = re.match(rf"ncl-cli: stopped by {name} at step (\d+) \(epoch 2\): ", lines[0])
    assert found and step <= int(found.group(1)) < 2 * step, lines[0]  # where it hung
    assert lines[0][found.end() :].startswith(
        f"no batch boundary within {GRACE_S} s (a training step, a validation hook or a data "
        f"loader worker is stuck), so nothing was saved now; the last checkpoint is {last} "
        f"(step {step}); resume with: "
    )
    assert lines[0].endswith("--ckpt_path last")
    deadline = time.monotonic() + 30
    while any(alive(pid) for pid in hung) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(alive(pid) for pid in hung), "a hung loader worker outlived the run"


# ------------------------------------------------------------------ the watchdog alone
@pytest.fixture
def term_handler():
    """A Python-level SIGTERM handler (as Lightning installs) for the test's duration."""
    seen: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda num, frame: seen.append(num))
    yield seen
    signal.signal(signal.SIGTERM, previous)


def test_watchdog_fires_after_the_grace_period(term_handler: list[int]) -> None:
    fired: list[tuple[int, float]] = []
    done = threading.Event()

    def expire(signum: int) -> None:
        fired.append((signum, time.monotonic()))
        done.set()

    watchdog = StopWatchdog(0.5, expire)
    watchdog.start()
    try:
        sent = time.monotonic()
        os.kill(os.getpid(), signal.SIGTERM)
        assert done.wait(30)
        ((signum, at),) = fired
        assert signum == signal.SIGTERM and at - sent >= 0.45
        assert term_handler == [signal.SIGTERM]  # the handler still ran
    finally:
        watchdog.stop()


def test_disarmed_watchdog_never_fires(term_handler: list[int]) -> None:
    fired: list[int] = []
    watchdog = StopWatchdog(0.3, fired.append)
    watchdog.start()
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(0.05)
    watchdog.stop()  # the boundary came
    time.sleep(0.6)
    assert fired == [] and term_handler == [signal.SIGTERM]
    assert signal.set_wakeup_fd(-1) == -1  # given back


def test_grace_from_the_environment(monkeypatch) -> None:
    monkeypatch.setenv("NCL_STOP_GRACE_S", "2.5")
    assert grace_from_env() == 2.5
    for bad in ("soon", "0", "-1"):
        monkeypatch.setenv("NCL_STOP_GRACE_S", bad)
        assert grace_from_env() == 10.0
