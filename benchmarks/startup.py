"""Start-up of the command line: ``python -m benchmarks startup``.

Wall-clock seconds of ``ncl-cli`` as a user runs it, a fresh process each time (the
console script next to this interpreter):

* ``ncl-cli --help`` (goal: under 3 s) — answered by [`ncl_lightning.entry`][] without
  importing torch or Lightning; at least 5 timed runs;
* ``ncl-cli fit --help`` and ``ncl-cli fit --model.help NCL`` — these build the
  LightningCLI parser, so they pay for importing Lightning (seconds); the number of lines
  printed is in the note (``--model.help NCL`` lists the method's arguments only).

One unmeasured warm-up run per command fills the file cache; the median is reported.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks import Timing
from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.foundation.progress import Progress

HELP_GOAL_S = 3.0
MIN_HELP_REPEATS = 5
COMMANDS: tuple[tuple[str, ...], ...] = (
    ("--help",),
    ("fit", "--help"),
    ("fit", "--model.help", "NCL"),
)


def console_script() -> Path:
    """The ``ncl-cli`` installed beside the running interpreter.

    Raises:
        ConfigError: There is none (the package is not installed in this environment).
    """
    script = Path(sys.executable).parent / "ncl-cli"
    if not script.is_file():
        raise ConfigError(
            f"no ncl-cli beside {sys.executable}; install the package (make install) first"
        )
    return script


def time_command(command: list[str], repeats: int) -> tuple[float, int]:
    """Median wall-clock seconds of ``command`` over ``repeats`` runs after one warm-up,
    and the lines it printed on stdout.

    Raises:
        ConfigError: The command exits with a status other than 0.
    """
    times, lines = [], 0
    for i in range(repeats + 1):
        start = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        elapsed = time.perf_counter() - start
        if done.returncode != 0:
            raise ConfigError(
                f"{' '.join(command)} exited with {done.returncode}: {done.stderr[-500:]}"
            )
        lines = len(done.stdout.splitlines())
        if i:  # the first run is the warm-up
            times.append(elapsed)
    return statistics.median(times), lines


def run(repeats: int = 3) -> list[Timing]:
    """One row per command of [`COMMANDS`][]: median seconds, the goal of the top-level
    help, and the lines printed."""
    script = str(console_script())
    progress = Progress(len(COMMANDS), "startup")
    rows = []
    for args in COMMANDS:
        n = max(repeats, MIN_HELP_REPEATS) if args == ("--help",) else max(1, repeats)
        what = f"ncl-cli {' '.join(args)}"
        with progress.unit(f"{what} ({n} timed runs)"):
            seconds, lines = time_command([script, *args], n)
        goal = HELP_GOAL_S if args == ("--help",) else None
        rows.append(Timing(what, seconds, goal, f"{lines} lines, median of {n}"))
    return rows
