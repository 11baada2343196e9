"""The values of the ``trainer`` section: counts, fractions, durations and precision, each
honoured as typed or refused with one line naming ``trainer.<key>``
([`check_trainer`][ncl_lightning.runtime.trainer_checks.check_trainer] runs them while the config is
parsed).

An integer and a float mean different things to Lightning: ``limit_train_batches: 1`` is
one batch per epoch, ``1.0`` every batch; ``val_check_interval: 1`` validates after every
batch, ``1.0`` once per epoch. [`count_or_fraction_types`][] makes the parser keep the
type the user wrote, and the checks below refuse what Lightning would change silently
(``16-mixed`` on a CPU) or reject later with a traceback (a ``max_time`` of ``01:00:00``).
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import re
from typing import Any, get_args

from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.foundation.internals import action_typehint, parser_actions, set_action_typehint
from ncl_lightning.foundation.validation import (
    check_at_least,
    check_count_or_fraction,
    check_int,
)


def config_get(cfg: Any, key: str) -> Any:
    """``cfg[key]`` for a dict or a jsonargparse ``Namespace``; ``None`` when absent."""
    getter = getattr(cfg, "get", None)
    return getter(key) if callable(getter) else None


def is_int(value: Any) -> bool:
    """An ``int`` that is not a ``bool``."""
    return isinstance(value, int) and not isinstance(value, bool)


def _check_int(key: str, value: Any, low: int, none_ok: bool = True) -> None:
    if value is None and none_ok:
        return
    check_int(f"trainer.{key}", value, low)


def _check_count_or_fraction(key: str, value: Any, int_low: int, allow_zero: bool) -> None:
    """An integer ``>= int_low`` (a count) or a float in [0, 1] / (0, 1] (a fraction)."""
    if value is None:
        return
    if isinstance(value, float) and value > 1.0 and value.is_integer():
        value = int(value)  # Lightning counts a float 3.0 as 3 batches
    check_count_or_fraction(f"trainer.{key}", value, int_low, allow_zero)


# Lightning declares these ``float | int``: jsonargparse then reads ``1`` as ``1.0``, which
# Lightning takes as the fraction 100% (every batch) where the user asked for 1 batch.
COUNT_OR_FRACTION_KEYS = (
    "limit_train_batches", "limit_val_batches", "limit_test_batches",
    "limit_predict_batches", "overfit_batches",
)  # fmt: skip
DURATION_FORMAT = re.compile(r"(\d+):(\d\d):(\d\d):(\d\d)")
DURATION_UNITS = ("weeks", "days", "hours", "minutes", "seconds", "milliseconds", "microseconds")
DURATION_HELP = (
    "a duration 'DD:HH:MM:SS' (e.g. 00:01:30:00 for 1.5 hours) or a mapping of "
    f"{', '.join(DURATION_UNITS)} (e.g. {{hours: 1, minutes: 30}})"
)


def count_or_fraction_types(parser: Any) -> None:
    """Read ``trainer.limit_*_batches`` and ``trainer.overfit_batches`` as typed: ``1`` an
    integer (one batch), ``1.0`` a float (100% of the batches), in a config file as on the
    command line.

    Lightning types them ``float | int``, so jsonargparse tries ``float`` first and turns
    ``1`` into ``1.0``; here they become ``int | float`` (``None`` kept where allowed).

    Args:
        parser: A LightningCLI parser to which the ``trainer`` arguments were added.
    """
    wanted = {f"trainer.{key}" for key in COUNT_OR_FRACTION_KEYS}
    for action in parser_actions(parser):
        typehint = action_typehint(action)
        if action.dest in wanted and typehint is not None:
            optional = type(None) in get_args(typehint)
            set_action_typehint(action, int | float | None if optional else int | float)


def duration_seconds(key: str, value: Any) -> float:
    """Seconds of a Lightning duration (``max_time``, a time-based ``val_check_interval``):
    ``'DD:HH:MM:SS'``, a mapping of ``datetime.timedelta`` units, or a ``timedelta``.

    Raises:
        ConfigError: Another string, an unknown unit, or a duration that is not > 0.
    """
    if isinstance(value, dt.timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, str):
        match = DURATION_FORMAT.fullmatch(value.strip())
        if not match:
            raise ConfigError(
                f"trainer.{key} must be {DURATION_HELP}, got {value!r}", key=f"trainer.{key}"
            )
        days, hours, minutes, secs = (int(g) for g in match.groups())
        parts = dt.timedelta(days=days, hours=hours, minutes=minutes, seconds=secs)
        seconds = parts.total_seconds()
    else:
        unknown = [k for k in value if k not in DURATION_UNITS]
        numbers = all(is_int(v) or isinstance(v, float) for v in value.values())
        if unknown or not numbers:
            raise ConfigError(
                f"trainer.{key} must be {DURATION_HELP}, got {dict(value)!r}",
                key=f"trainer.{key}",
            )
        seconds = dt.timedelta(**value).total_seconds()
    if not seconds > 0:
        raise ConfigError(
            f"trainer.{key} must be a duration > 0, got {value!r} ({seconds:g} s): the run "
            "would stop before its first step",
            key=f"trainer.{key}",
        )
    return seconds


def _is_duration(value: Any) -> bool:
    return isinstance(value, str | dt.timedelta) or hasattr(value, "items")


def check_numbers(trainer: Any) -> None:
    """Counts, limits, intervals and durations of the ``trainer`` section."""
    _check_int("max_epochs", config_get(trainer, "max_epochs"), -1)
    _check_int("min_epochs", config_get(trainer, "min_epochs"), 0)
    _check_int("max_steps", config_get(trainer, "max_steps"), -1)
    _check_int("min_steps", config_get(trainer, "min_steps"), 0)
    _check_int("check_val_every_n_epoch", config_get(trainer, "check_val_every_n_epoch"), 1)
    _check_int("log_every_n_steps", config_get(trainer, "log_every_n_steps"), 0)
    _check_int("accumulate_grad_batches", config_get(trainer, "accumulate_grad_batches"), 1)
    _check_int("num_nodes", config_get(trainer, "num_nodes"), 1)
    _check_int("num_sanity_val_steps", config_get(trainer, "num_sanity_val_steps"), -1)
    interval = config_get(trainer, "val_check_interval")
    if _is_duration(interval):
        duration_seconds("val_check_interval", interval)
    else:
        _check_count_or_fraction("val_check_interval", interval, 1, False)
        every = config_get(trainer, "check_val_every_n_epoch")
        if every is None and isinstance(interval, float):
            raise ConfigError(
                f"trainer.val_check_interval={interval} is a float (a fraction of an epoch), but "
                "trainer.check_val_every_n_epoch is null (validation counted in batches "
                "over the whole run); give val_check_interval as a number of batches or a "
                "duration, or set check_val_every_n_epoch",
                key="trainer.val_check_interval",
            )
    if config_get(trainer, "max_time") is not None:
        duration_seconds("max_time", config_get(trainer, "max_time"))
    for key in COUNT_OR_FRACTION_KEYS:
        _check_count_or_fraction(key, config_get(trainer, key), 0, True)
    algorithm = config_get(trainer, "gradient_clip_algorithm")
    if algorithm is not None and algorithm not in ("norm", "value"):
        raise ConfigError(
            f"trainer.gradient_clip_algorithm: {algorithm!r} is not valid; valid choices: "
            "'norm', 'value'",
            key="trainer.gradient_clip_algorithm",
        )
    clip = config_get(trainer, "gradient_clip_val")
    if clip is not None:
        if isinstance(clip, bool) or not isinstance(clip, int | float):
            raise ConfigError(
                f"trainer.gradient_clip_val must be a number, got {clip!r}",
                key="trainer.gradient_clip_val",
            )
        check_at_least("trainer.gradient_clip_val", clip, 0)


# Lightning's short names of its precisions.
PRECISION_ALIASES = {16: "16-mixed", "16": "16-mixed", "bf16": "bf16-mixed", 32: "32-true",
                     "32": "32-true", 64: "64-true", "64": "64-true"}  # fmt: skip


def check_precision(precision: Any, accelerator: str) -> None:
    """``trainer.precision`` runs as given on ``accelerator`` (a resolved name: ``cpu``,
    ``cuda``, ``mps``, ...), or is refused.

    Lightning replaces ``16-mixed`` (and ``16``) by ``bf16-mixed`` on a CPU with a
    warning, so the run would not train in the precision the config records; the
    ``transformer-engine`` precisions need NVIDIA's ``transformer_engine`` package and a
    GPU.

    Raises:
        ConfigError: Naming ``trainer.precision``, the value and what to set instead.
    """
    if precision is None:
        return
    flag = PRECISION_ALIASES.get(precision, precision)
    if flag == "16-mixed" and accelerator == "cpu":
        raise ConfigError(
            f"trainer.precision: {precision!r} (float16 mixed precision) does not run on a "
            "CPU (Lightning would train in bf16-mixed instead); set --trainer.precision "
            "bf16-mixed or 32-true, or train on a GPU",
            key="trainer.precision",
        )
    if isinstance(flag, str) and flag.startswith("transformer-engine"):
        if accelerator != "cuda":
            problem = f"runs on NVIDIA GPUs only, and this run trains on {accelerator}"
        elif importlib.util.find_spec("transformer_engine") is None:
            problem = "needs NVIDIA's transformer_engine package, which is not installed"
        else:
            return
        others = (
            "bf16-mixed or 32-true" if accelerator == "cpu" else "bf16-mixed, 16-mixed or 32-true"
        )
        raise ConfigError(
            f"trainer.precision: {precision!r} {problem}; set {others}",
            key="trainer.precision",
        )


__all__ = [
    "COUNT_OR_FRACTION_KEYS",
    "check_numbers",
    "check_precision",
    "config_get",
    "count_or_fraction_types",
    "duration_seconds",
    "is_int",
]
