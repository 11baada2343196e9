"""Progress lines of long scripts: formatting, ETA arithmetic (injected clock), quiet logs."""

from __future__ import annotations

import logging
import warnings

import pytest

from ncl_lightning.foundation import progress as progress_module
from ncl_lightning.foundation.progress import (
    LIGHTNING_LOGGERS,
    Progress,
    format_duration,
    quiet_lightning,
)


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(progress_module, "monotonic", clock)
    return clock


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.04, "0.0s"),
        (3.24, "3.2s"),
        (42.4, "42s"),
        (59.6, "1m00s"),
        (252.0, "4m12s"),
        (3599.6, "1h00m"),
        (7380.0, "2h03m"),
        (36_000.0, "10h00m"),
    ],
)
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def test_lines_and_eta_match_a_hand_computation(
    clock: Clock, capsys: pytest.CaptureFixture[str]
) -> None:
    """Four units: one reused, three timed 30 s, 60 s and 7,210 s.

    By hand (ETA = elapsed / finished x remaining):
    - start a at t=0: nothing finished, ETA unknown;
    - end a at 30: mean 30 s, 3 left -> 90 s;
    - b reused; start c at 30: 2 left (c, d) -> 30 / 1 x 2 = 60 s;
    - end c at 90: mean 45 s, 1 left -> 45 s; start d at 90: 1 left -> 45 s;
    - end d at 7,300: 0 left; the summary says 7,300 s = 2h02m (121.7 min).
    """
    progress = Progress(4, "run")
    start = clock.now
    progress.start("landscape a")
    clock.now = start + 30
    progress.end("landscape a")
    progress.skip("landscape b")
    progress.start("landscape c")
    clock.now = start + 90
    progress.end("landscape c")
    with progress.unit("landscape d"):
        clock.now = start + 7300
    summary = progress.finish()
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        "[run 1/4] landscape a | elapsed 0.0s | ETA ?",
        "[run 1/4] done in 30s: landscape a | elapsed 30s | ETA 1m30s",
        "[run 2/4] reused: landscape b",
        "[run 3/4] landscape c | elapsed 30s | ETA 1m00s",
        "[run 3/4] done in 1m00s: landscape c | elapsed 1m30s | ETA 45s",
        "[run 4/4] landscape d | elapsed 1m30s | ETA 45s",
        "[run 4/4] done in 2h00m: landscape d | elapsed 2h02m | ETA 0.0s",
        "[run] 4/4 done in 2h02m (1 reused)",
    ]
    assert summary == lines[-1]
    assert (progress.finished, progress.skipped, progress.done) == (3, 1, 4)


def test_ends_without_starts_count_completions_of_parallel_workers(
    clock: Clock, capsys: pytest.CaptureFixture[str]
) -> None:
    """Units finishing in worker processes: the ETA is the time between completions."""
    progress = Progress(6, "run")
    clock.now += 20
    progress.end("x")  # 20 s for the first, 5 left -> 100 s
    clock.now += 0.5
    progress.end("y")  # 20.5 s for two, 4 left -> 41 s
    assert capsys.readouterr().err.splitlines() == [
        "[run 1/6] done: x | elapsed 20s | ETA 1m40s",
        "[run 2/6] done: y | elapsed 20s | ETA 41s",
    ]


def test_lines_go_to_stderr_by_default(capsys: pytest.CaptureFixture) -> None:
    progress = Progress(1, "bench")
    with progress.unit("metrics"):
        pass
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("[bench 1/1] metrics | elapsed ")


def test_a_unit_that_raises_is_not_counted_done() -> None:
    progress = Progress(2)
    with pytest.raises(KeyError), progress.unit("a"):
        raise KeyError("a")
    assert progress.finished == 0


def test_quiet_lightning_restores_the_levels_even_on_errors() -> None:
    """The context manager replaces the throughput bench's leaked ``setLevel(WARNING)``."""
    loggers = [logging.getLogger(name) for name in LIGHTNING_LOGGERS]
    saved = [logger.level for logger in loggers]
    try:
        for logger in loggers:
            logger.setLevel(logging.INFO)
        with pytest.raises(KeyError), quiet_lightning():
            assert all(logger.level == logging.WARNING for logger in loggers)
            assert not logging.getLogger("lightning.pytorch.core").isEnabledFor(logging.INFO)
            raise KeyError("inside")
        assert all(logger.level == logging.INFO for logger in loggers)
        with quiet_lightning(verbose=True):
            assert all(logger.level == logging.INFO for logger in loggers)
    finally:
        for logger, level in zip(loggers, saved, strict=True):
            logger.setLevel(level)


def test_quiet_lightning_drops_only_the_repeated_notices() -> None:
    """torch's LeafSpec notice raised in Lightning is dropped; LightningCLI's ``args``
    caution is no longer raised by ncl-cli (its cause is gone), so it is not filtered."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with quiet_lightning():
            notice = "`isinstance(treespec, LeafSpec)` is deprecated"
            warnings.warn(notice, FutureWarning, stacklevel=1)
            warnings.warn("LightningCLI's args parameter is intended to run", stacklevel=1)
            warnings.warn("something else", stacklevel=1)
    assert [str(w.message) for w in seen] == [
        "LightningCLI's args parameter is intended to run", "something else"
    ]  # fmt: skip
