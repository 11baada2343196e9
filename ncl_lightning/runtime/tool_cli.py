"""What the package's tools (``python -m ncl_lightning.atlas``, ``.plot``, ``.studies.*``)
share with ``ncl-cli`` on bad input: one line ``<tool>: error: <key or path>: <problem>`` on
stderr, exit status 2, no traceback (``NCL_TRACEBACK=1`` shows it).

[`ToolArgumentParser`][] says argparse's own errors (an unknown option, an invalid choice,
a value of the wrong type) in that line; [`run_tool`][] says the errors the tool's input
checks raise ([`NCLError`][ncl_lightning.foundation.errors.NCLError]) and those
``user_error_message`` recognises. A fault while the
tool works (``RuntimeError`` kinds, such as a study cell that failed) exits with 1.
Nothing heavy is imported here: Lightning only when an error is not one of ours.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable
from typing import NoReturn, TypeVar

from ncl_lightning.foundation.errors import NCLError

TRACEBACK_ENV = "NCL_TRACEBACK"  # the same switch as ncl-cli's
INPUT_ERROR, RUN_ERROR = 2, 1
_ARGUMENT = re.compile(r"^argument ([^:]+): ")  # argparse: "argument --space: invalid choice"
T = TypeVar("T")


def fail(prog: str, message: str, status: int = INPUT_ERROR) -> NoReturn:
    """Write ``<prog>: error: <message>`` (one line) to stderr and exit with ``status``."""
    line = " ".join(part.strip() for part in str(message).splitlines() if part.strip())
    sys.stderr.write(f"{prog}: error: {line}\n")
    raise SystemExit(status)


class ToolArgumentParser(argparse.ArgumentParser):
    """``argparse`` whose errors are one line (no usage block): ``<prog>: error: --space:
    invalid choice: 'q' (choose from 'z', 'h')``, exit status 2."""

    def error(self, message: str) -> NoReturn:
        if os.environ.get(TRACEBACK_ENV):
            super().error(message)
        fail(self.prog, _ARGUMENT.sub(r"\1: ", message) + f" (see {self.prog} --help)")


def tool_error_message(err: BaseException) -> str | None:
    """The one line for a user-caused error, or ``None`` for a bug (keeps its traceback)."""
    if isinstance(err, NCLError):
        return " ".join(line.strip() for line in str(err).splitlines() if line.strip())
    from ncl_lightning.runtime.cli_errors import user_error_message  # imports Lightning

    return user_error_message(err)


def run_tool(prog: str, work: Callable[[], T]) -> T:
    """Run ``work`` (a tool's body); an error of input ends the process with one line.

    Args:
        prog: The tool's name as the user typed it (``python -m ncl_lightning.atlas``).
        work: Checks every input first, then works.

    Returns:
        What ``work`` returns.

    Raises:
        SystemExit: Status 2 for bad input, 1 for a fault while working (a
            ``RuntimeError`` kind of [`NCLError`][], e.g. a study cell that failed).
    """
    try:
        return work()
    except Exception as err:
        message = None if os.environ.get(TRACEBACK_ENV) else tool_error_message(err)
        if message is None:
            raise
        fail(prog, message, RUN_ERROR if isinstance(err, RuntimeError) else INPUT_ERROR)


__all__ = ["ToolArgumentParser", "fail", "run_tool", "tool_error_message"]
