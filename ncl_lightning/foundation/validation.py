"""Argument checks shared by every layer: one-line [`ConfigError`][] messages.

Each check names the argument (the key under ``init_args`` in a config) and carries it as
``err.key``: ``<key> must be ..., got <value>``. NaN and infinities fail every numeric check.
These are the only copies (``tests/foundation/test_validation.py`` fails on such a message
written anywhere else).
"""

from __future__ import annotations

import math
import numbers
import os
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ncl_lightning.foundation.errors import ConfigError


def check_finite(key: str, value: float) -> None:
    """``ConfigError`` for an infinite or NaN ``value``."""
    if not math.isfinite(value):
        raise ConfigError(f"{key} must be a finite number, got {value!r}", key=key)


def check_positive(key: str, value: float) -> None:
    """``ConfigError`` unless ``value`` is a finite number ``> 0`` (NaN and inf fail)."""
    if not value > 0:
        raise ConfigError(f"{key} must be > 0, got {value!r}", key=key)
    check_finite(key, value)


def check_at_least(key: str, value: float, low: float) -> None:
    """``ConfigError`` unless ``value`` is a finite number ``>= low`` (NaN and inf fail)."""
    if not value >= low:
        raise ConfigError(f"{key} must be >= {low}, got {value!r}", key=key)
    check_finite(key, value)


def check_int(key: str, value: Any, low: int = 1) -> None:
    """``ConfigError`` unless ``value`` is an integer ``>= low`` (a count, a size, an index;
    ``bool`` and floats such as ``2.0`` fail, NumPy integers pass)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
        raise ConfigError(f"{key} must be an integer >= {low}, got {value!r}", key=key)


def check_range(key: str, value: float, low: float, high: float, closed: str = "[]") -> None:
    """``ConfigError`` unless ``value`` is a finite number in the interval; ``closed`` gives
    its brackets (``"[]"``, ``"[)"``, ``"(]"``, ``"()"``)."""
    above = value >= low if closed[0] == "[" else value > low
    below = value <= high if closed[1] == "]" else value < high
    if not (above and below):
        raise ConfigError(
            f"{key} must be in {closed[0]}{low}, {high}{closed[1]}, got {value!r}", key=key
        )
    check_finite(key, value)  # an infinite bound lets inf through the comparisons


def check_pair(key: str, pair: Sequence[float], low: float, high: float) -> tuple[float, float]:
    """``ConfigError`` unless ``pair`` is ``(min, max)`` of finite numbers with
    ``low < min <= max <= high`` (a range of a random draw); returns it as two floats."""
    values = tuple(pair)
    if len(values) != 2 or not low < values[0] <= values[1] <= high:
        raise ConfigError(
            f"{key} must be (min, max) with {low} < min <= max <= {high}, got {pair}", key=key
        )
    for value in values:
        check_finite(key, value)
    return float(values[0]), float(values[1])


def check_shape(key: str, value: Any, shape: Sequence[int | str]) -> None:
    """``ConfigError`` unless ``value.shape`` (a tensor's or an array's) matches ``shape``:
    as many dimensions, and each ``int`` entry equal (a ``str`` entry, ``"N"``, is a name
    that matches any size).

    Example: ``check_shape("z", z, ("N", num_features))`` gives
    ``z must have shape [N, 64], got (8, 32)``.
    """
    actual = tuple(value.shape)
    if len(actual) != len(shape) or any(
        isinstance(want, int) and got != want for got, want in zip(actual, shape, strict=False)
    ):
        dims = ", ".join(str(d) for d in shape)
        raise ConfigError(f"{key} must have shape [{dims}], got {actual}", key=key)


def check_indices(key: str, values: Any, high: int) -> None:
    """``ConfigError`` unless every entry of ``values`` (an integer tensor of labels or
    indices; empty passes) lies in ``[0, high)``: one out of range would break an index,
    a ``one_hot`` or a ``scatter`` later (or assert on a GPU)."""
    if values.numel() and (values.min() < 0 or values.max() >= high):
        low, top = int(values.min()), int(values.max())
        raise ConfigError(
            f"{key} must hold values in [0, {high}), got values from {low} to {top}", key=key
        )


def check_choice(key: str, value: Any, choices: Iterable[Any]) -> None:
    """``ConfigError`` listing ``choices`` unless ``value`` is one of them."""
    choices = list(choices)
    if value not in choices:
        valid = ", ".join(repr(c) for c in choices)
        raise ConfigError(f"{key} must be one of {valid}, got {value!r}", key=key)


def check_given(key: str, value: Any, how: str) -> None:
    """``ConfigError`` when a value the configuration requires is missing (``None`` or an
    empty string): ``<key> is required: <how>`` (``how``: why, and how to give it)."""
    if value is None or value == "":
        raise ConfigError(f"{key} is required: {how}", key=key)


def check_output_dir(key: str, path: str | os.PathLike[str]) -> None:
    """``path`` is, or can be made, a writable folder: neither it nor an ancestor is a
    file, and its nearest existing ancestor accepts a new entry (probed with a temporary
    folder that is removed at once, so a read-only mount or an ACL is caught too).

    Raises:
        ConfigError: Naming ``key`` and the path.
    """
    target = Path(path).expanduser()
    if target.exists() and not target.is_dir():
        raise ConfigError(f"{key}: {target} is a file, not a folder", key=key)
    parent = target
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise ConfigError(f"{key}: {target}: {parent} is a file, not a folder", key=key)
    try:
        probe = tempfile.mkdtemp(prefix=".ncl-write-check-", dir=parent)
    except OSError as err:
        raise ConfigError(
            f"{key}: {target}: cannot create folders in {parent} ({err.strerror or err})",
            key=key,
        ) from None
    os.rmdir(probe)
