"""User-facing errors: one line that names the culprit and what to do.

``ncl-cli`` prints these as ``ncl-cli: error: <message>`` without a traceback (set
``NCL_TRACEBACK=1`` to see it). Every class also derives from the built-in exception a
Python caller would expect (``ValueError`` for bad values, ``FileNotFoundError`` for
missing paths, ``RuntimeError`` for faults during training), so ``except ValueError``
keeps working.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class NCLError(Exception):
    """Base of every error a user can cause; ``ncl-cli`` reports it in one line.

    Args:
        message: The one line: the culprit, what was expected, what to do.
        key: The config key at fault (``model.init_args.temperature``, ``temperature``,
            ``data.init_args.root``), when one is; ``None`` otherwise.
    """

    def __init__(self, message: str = "", *args: object, key: str | None = None) -> None:
        super().__init__(message, *args)
        self.key = key


class ConfigError(NCLError, ValueError):
    """A configuration value that cannot work: the key, the value and the valid choices."""


class DataError(NCLError, ValueError):
    """Missing, empty, too small or unreadable data: the path and what was expected."""


class DataNotFoundError(DataError, FileNotFoundError):
    """A data folder or file that does not exist."""


class CorruptImageError(DataError, OSError):
    """An image file that cannot be decoded (corrupt or truncated); names the file."""


class EmptyMetricError(NCLError, ValueError, RuntimeError):
    """A metric's ``compute()`` called before any ``update()``: nothing to compute from.

    Both a ``ValueError`` and a ``RuntimeError``, so a caller catching either catches it."""


class UsageError(NCLError, RuntimeError):
    """A call made out of order from Python (a loader before ``setup``, a test epoch that
    never saw its training features); names the call to make first."""


class NonFiniteLossError(NCLError, RuntimeError):
    """Training stopped on a NaN/Inf loss; names the step and the checkpoint saved."""


class RunFailedError(NCLError, RuntimeError):
    """A child ``ncl-cli`` run (one cell of a study) exited non-zero; names its log file."""


class RunFaultError(NCLError, OSError, RuntimeError):
    """A file or folder of a run that became unusable while the run worked (deleted,
    unmounted, its permissions changed): a fault, not bad input (``ncl-cli`` exits 1)."""


class DownloadError(NCLError, OSError, RuntimeError):
    """Pretrained weights that could not be downloaded: names them, the cause and where to
    put them by hand on a machine without network. A fault, not bad input (``ncl-cli``
    exits 1)."""


class DiskFullError(NCLError, OSError, RuntimeError):
    """A file could not be written for lack of room (``ENOSPC``, ``EDQUOT``, ``EFBIG``):
    names the path and the space it needs against the space free; the previous file is
    kept and nothing half-written is left ([`ncl_lightning.foundation.disk`][]). A fault of
    the machine, not of the input: also a ``RuntimeError`` (``ncl-cli`` exits 1).

    Attributes:
        path: The file that could not be written.
        needed: Bytes it needs (an estimate, or a lower bound), when known.
        free: Bytes free to this user in its folder, when known.
    """

    def __init__(
        self,
        message: str = "",
        *args: object,
        key: str | None = None,
        path: str | None = None,
        needed: int | None = None,
        free: int | None = None,
    ) -> None:
        super().__init__(message, *args, key=key)
        self.path, self.needed, self.free = path, needed, free


def closest(name: str, choices: Iterable[str]) -> str | None:
    """The choice most similar to ``name`` (``difflib``, cutoff 0.6), or ``None``."""
    matches = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.6)
    return matches[0] if matches else None


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """``"; did you mean 'x'?"`` for the closest choice, or ``""`` when none is close."""
    match = closest(name, choices)
    return f"; did you mean {match!r}?" if match else ""


__all__ = [
    "ConfigError",
    "CorruptImageError",
    "DataError",
    "DataNotFoundError",
    "DiskFullError",
    "DownloadError",
    "EmptyMetricError",
    "NCLError",
    "NonFiniteLossError",
    "RunFailedError",
    "UsageError",
    "closest",
    "did_you_mean",
]
