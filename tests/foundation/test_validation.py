"""The argument checks of ``foundation.validation``.

Every numeric check refuses NaN and both infinities; the integer, shape and index checks
say what they expected.
"""

from __future__ import annotations

import math
from collections.abc import Callable
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
