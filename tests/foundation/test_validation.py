"""The argument checks of ``foundation.validation``, and that they are the only copies.

Every numeric check refuses NaN and both infinities; the integer, shape and index checks
say what they expected. The scan at the end reads every module of the package and fails,
naming ``file:line``, on a hand-written ``<key> must be >= ...`` message outside
``foundation/validation.py``.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.foundation.validation import (
    check_at_least,
    check_choice,
    check_finite,
    check_given,
    check_indices,
    check_int,
    check_pair,
    check_positive,
    check_range,
    check_shape,
)

NUMERIC_CHECKS: dict[str, Callable[[float], Any]] = {
    "check_finite": lambda v: check_finite("x", v),
    "check_positive": lambda v: check_positive("x", v),
    "check_at_least": lambda v: check_at_least("x", v, 0),
    "check_at_least(-inf)": lambda v: check_at_least("x", v, -math.inf),
    "check_int": lambda v: check_int("x", v, 0),
    "check_range[]": lambda v: check_range("x", v, 0, 1),
    "check_range(-inf, inf)": lambda v: check_range("x", v, -math.inf, math.inf, "()"),
    "check_range[0, inf]": lambda v: check_range("x", v, 0, math.inf),
    "check_pair min": lambda v: check_pair("x", (v, 1.0), 0.0, math.inf),
    "check_pair max": lambda v: check_pair("x", (0.5, v), 0.0, math.inf),
}


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf], ids=["nan", "inf", "-inf"])
@pytest.mark.parametrize("check", list(NUMERIC_CHECKS))
def test_every_numeric_check_refuses_nan_and_infinities(check: str, bad: float) -> None:
    with pytest.raises(ConfigError, match=r"^x must be .*, got ") as err:
        NUMERIC_CHECKS[check](bad)
    assert err.value.key == "x"


@pytest.mark.parametrize("check", list(NUMERIC_CHECKS))
def test_every_numeric_check_accepts_a_plain_value(check: str) -> None:
    NUMERIC_CHECKS[check](1)


@pytest.mark.parametrize(
    ("value", "low", "message"),
    [
        (0, 1, "k must be an integer >= 1, got 0"),
        (2.0, 1, "k must be an integer >= 1, got 2.0"),
        (True, 0, "k must be an integer >= 0, got True"),
        ("3", 1, "k must be an integer >= 1, got '3'"),
        (-1, 0, "k must be an integer >= 0, got -1"),
    ],
)
def test_check_int_refuses_what_is_not_a_count(value: Any, low: int, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        check_int("k", value, low)
    assert str(err.value) == message and err.value.key == "k"


def test_check_int_accepts_python_and_numpy_integers() -> None:
    check_int("k", 1)
    check_int("k", np.int64(3), 3)
    check_int("k", 0, 0)


def test_range_and_choice_messages() -> None:
    with pytest.raises(ConfigError, match=r"^p must be in \(0, 1\], got 0$"):
        check_range("p", 0, 0, 1, "(]")
    check_range("p", 1, 0, 1, "(]")
    with pytest.raises(ConfigError, match=r"^rank must be in \[0, 2\), got 2$"):
        check_range("rank", 2, 0, 2, "[)")
    with pytest.raises(ConfigError, match=r"^mode must be one of 'a', 'b', got 'c'$"):
        check_choice("mode", "c", ("a", "b"))


def test_check_shape_names_the_expected_and_the_given_shape() -> None:
    check_shape("z", torch.zeros(3, 4), ("N", 4))
    check_shape("labels", torch.zeros(3), (3,))
    for bad in (torch.zeros(3, 5), torch.zeros(3), torch.zeros(3, 4, 1)):
        with pytest.raises(ConfigError) as err:
            check_shape("z", bad, ("N", 4))
        assert str(err.value) == f"z must have shape [N, 4], got {tuple(bad.shape)}"
        assert err.value.key == "z"


def test_check_indices_names_the_range_and_the_values_found() -> None:
    check_indices("labels", torch.tensor([0, 2, 1]), 3)
    check_indices("labels", torch.zeros(0, dtype=torch.long), 3)  # nothing to index with
    for bad, found in ((torch.tensor([0, 3]), "0 to 3"), (torch.tensor([-1, 1]), "-1 to 1")):
        with pytest.raises(ConfigError) as err:
            check_indices("labels", bad, 3)
        assert str(err.value) == f"labels must hold values in [0, 3), got values from {found}"


def test_check_given_refuses_none_and_empty_and_names_the_key() -> None:
    check_given("pretrained", "runs/cl/last.ckpt", "give it")
    check_given("count", 0, "give it")  # a falsy value is still a value
    for missing in (None, ""):
        with pytest.raises(ConfigError) as err:
            check_given("pretrained", missing, "give --model.init_args.pretrained <file>")
        assert str(err.value) == "pretrained is required: give --model.init_args.pretrained <file>"
        assert err.value.key == "pretrained"


# ------------------------------------------------------------ no check written elsewhere
PACKAGE = Path(__file__).resolve().parents[2] / "ncl_lightning"

# A message of an argument check: what the functions above write.
CHECK_MESSAGE = re.compile(
    r"must be (?:>=?\s|in [\[(]|an? int(?:eger)?\b|a finite number|one of\b)"
)

# Modules allowed to hold such text: the checks themselves, and the parser of third-party
# messages (regexes matching jsonargparse's and Lightning's own wording).
ALLOWED = {"foundation/validation.py", "runtime/cli_errors.py"}


def _text(node: ast.AST) -> str | None:
    """The literal text of a string or f-string node (``{}`` for each placeholder)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
    return None


def _check_messages(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """``(line, text)`` of every string or f-string that reads like an argument check;
    docstrings are left out (they describe the checks, in the same words)."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            skip.add(id(body[0].value))  # a docstring
        if isinstance(node, ast.JoinedStr):
            skip.update(id(v) for v in node.values)  # parts of an f-string: read once, whole
    for node in ast.walk(tree):
        text = None if id(node) in skip else _text(node)
        if text is not None and CHECK_MESSAGE.search(text):
            yield node.lineno, text


def test_the_scan_sees_a_hand_written_check() -> None:
    source = (
        'def f(k):\n    """k must be >= 1."""\n'
        '    message = f"k must be >= 1, got {k}"\n    raise ValueError(message)\n'
    )
    assert list(_check_messages(ast.parse(source))) == [(3, "k must be >= 1, got {}")]


def test_argument_checks_are_written_only_in_foundation_validation() -> None:
    found = [
        f"ncl_lightning/{path.relative_to(PACKAGE).as_posix()}:{line}: {text!r}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.relative_to(PACKAGE).as_posix() not in ALLOWED
        for line, text in _check_messages(ast.parse(path.read_text(), str(path)))
    ]
    assert not found, (
        "argument checks written by hand; call ncl_lightning.foundation.validation "
        "(check_positive, check_at_least, check_int, check_range, check_choice...):\n"
        + "\n".join(found)
    )
