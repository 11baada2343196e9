"""The one place ``ncl-cli`` and the package's tools print an error of ours: an
[`NCLError`][ncl_lightning.foundation.errors.NCLError] (also wrapped by jsonargparse or a
DataLoader worker), an ``OSError`` naming a path and Lightning's ``MisconfigurationException``
become one line ``<prog>: error: <message>``, exit status 2 (1 for a fault while working);
anything else keeps its traceback (``NCL_TRACEBACK=1``: always). Nothing heavy is imported
here: the tools use it too."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import NoReturn, TypeVar

from ncl_lightning.foundation.errors import NCLError

TRACEBACK_ENV = "NCL_TRACEBACK"
INPUT_ERROR, RUN_ERROR = 2, 1
T = TypeVar("T")


def one_line(text: object) -> str:
    """``text`` with its lines joined by spaces."""
    return " ".join(line.strip() for line in str(text).splitlines() if line.strip())


def ours(err: BaseException) -> NCLError | None:
    """The [`NCLError`][ncl_lightning.foundation.errors.NCLError] that ``err`` is or was raised
    from (jsonargparse re-raises a class's own error while it builds the class)."""
    seen: set[int] = set()
    cause: BaseException | None = err
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, NCLError):
            return cause
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return None


def _group(err: BaseException) -> str:
    """``"model.init_args."`` / ``"data.init_args."`` when ``err`` was raised while
    LightningCLI built the model or the DataModule (the ``self`` of an ``__init__`` on its
    traceback), else ``""``."""
    import lightning as L

    tb = err.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code.co_name == "__init__":
            built = frame.f_locals.get("self")
            if isinstance(built, L.LightningModule):
                return "model.init_args."
            if isinstance(built, L.LightningDataModule):
                return "data.init_args."
        tb = tb.tb_next
    return ""


def _message(err: NCLError) -> str:
    """An error of ours in one line; re-raised from a DataLoader worker (its message is
    then the worker's traceback), the last line of that traceback, as Python writes it."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    if len(lines) > 1 and type(err).__name__ in lines[-1]:
        for name in (f"{type(err).__module__}.{type(err).__qualname__}", type(err).__name__):
            if lines[-1].startswith(f"{name}: "):
                return lines[-1].removeprefix(f"{name}: ")
    return " ".join(lines) or type(err).__name__


def error_message(err: BaseException) -> str | None:
    """The one line printed for ``err``, or ``None`` for a bug (whose traceback is shown)."""
    found = ours(err)
    if found is not None:
        message, group = _message(found), _group(found) if found is not err else ""
        key = found.key or ""
        return group + message if group and key and message.startswith(key) else message
    if isinstance(err, OSError) and err.filename is not None:  # a path that cannot be used
        other = f" -> {err.filename2}" if err.filename2 is not None else ""
        return f"{err.filename}{other}: {err.strerror or one_line(err)}"
    from lightning.fabric.utilities.exceptions import MisconfigurationException

    if isinstance(err, MisconfigurationException):  # Lightning's refusal of a Trainer value
        return one_line(err)
    return None


def fail(prog: str, message: str, status: int = INPUT_ERROR) -> NoReturn:
    """Write ``<prog>: error: <message>`` (one line) to stderr and exit with ``status``."""
    sys.stderr.write(f"{prog}: error: {one_line(message)}\n")
    raise SystemExit(status)


def run_main(prog: str, work: Callable[[], T]) -> T:
    """Run ``work``; an error of ours ends the process with one line (status 2, or 1 for a
    ``RuntimeError`` kind: a fault while working), any other keeps its traceback."""
    try:
        return work()
    except Exception as err:
        message = None if os.environ.get(TRACEBACK_ENV) else error_message(err)
        if message is None:
            raise
        fault = isinstance(ours(err) or err, RuntimeError)
        fail(prog, message, RUN_ERROR if fault else INPUT_ERROR)


class ToolArgumentParser(argparse.ArgumentParser):
    """``argparse`` whose errors are one line (no usage block), exit status 2:
    ``<prog>: error: argument --space: invalid choice: 'q' (choose from 'z', 'h')``."""

    def error(self, message: str) -> NoReturn:
        if os.environ.get(TRACEBACK_ENV):
            super().error(message)
        fail(self.prog, f"{message} (see {self.prog} --help)")
