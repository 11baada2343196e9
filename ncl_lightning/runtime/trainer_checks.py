"""Checks of the ``trainer`` section of a parsed ``ncl-cli`` config, before Lightning
builds anything.

Lightning validates its ``Trainer`` arguments while it builds the trainer, the
accelerator and the strategy, with messages that do not name the config key, and some of
its exceptions are plain ``TypeError``/``ValueError`` (indistinguishable from a bug). An
output folder that is a file or not writable is found only when the first log or
checkpoint is written. [`check_trainer`][] checks each value where it is declared and
raises one [`ConfigError`][ncl_lightning.foundation.errors.ConfigError] naming ``trainer.<key>``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.accelerators import AcceleratorRegistry
from lightning.pytorch.strategies import StrategyRegistry

from ncl_lightning.foundation.errors import ConfigError, closest
from ncl_lightning.foundation.internals import layer_sync
from ncl_lightning.foundation.validation import check_output_dir
from ncl_lightning.runtime.trainer_values import (
    check_numbers,
    check_precision,
    config_get,
    count_or_fraction_types,
    duration_seconds,
    is_int,
)

_AUTO = "auto"


def _accelerator_class(name: str) -> type:
    """The accelerator class Lightning would pick for ``name`` (``gpu``: CUDA, else MPS)."""
    if name == "gpu":
        available = _available_accelerators()
        name = next((n for n in ("mps", "cuda") if n in available), "cuda")
    return AcceleratorRegistry[name]["accelerator"]


def _available_accelerators() -> list[str]:
    names = sorted(AcceleratorRegistry.available_accelerators())
    return [n for n in names if AcceleratorRegistry[n]["accelerator"].is_available()]


def _check_devices(devices: Any, name: str, cls: type) -> None:
    """``devices`` through the accelerator's own parser; a parse to no device is refused."""
    if devices is None or devices == _AUTO:
        return
    try:
        parsed = cls.parse_devices(devices)
    except (MisconfigurationException, TypeError, ValueError):
        parsed = None
    if parsed is None or parsed == []:
        if name == "cpu":
            remedy = "give a number of processes >= 1, or 'auto'"
        else:
            count = cls.auto_device_count() if cls.is_available() else 0
            remedy = (
                f"{count} {name} device(s) on this machine; give a count >= 1, a list of "
                "indices, -1 for all, or 'auto'"
            )
        raise ConfigError(
            f"trainer.devices: {devices!r} is not valid for accelerator {name!r} ({remedy})",
            key="trainer.devices",
        )


def check_hardware(trainer: Any) -> None:
    """``accelerator`` is known and present on this machine, ``devices`` is valid for it
    (Lightning's own parser of the accelerator, attributed to the key), ``strategy`` is a
    registered name."""
    accelerator = config_get(trainer, "accelerator")
    if isinstance(accelerator, str):
        name = accelerator.lower()
        known = sorted(AcceleratorRegistry.available_accelerators())
        if name != _AUTO and name != "gpu" and name not in known:
            hint = closest(name, [*known, "gpu", _AUTO])
            raise ConfigError(
                f"trainer.accelerator: unknown accelerator {accelerator!r}"
                + (f" (did you mean {hint!r}?)" if hint else "")
                + f"; valid: {', '.join([_AUTO, 'gpu', *known])}",
                key="trainer.accelerator",
            )
        if name == _AUTO:
            available = _available_accelerators()
            name = next((n for n in ("cuda", "mps", "tpu") if n in available), "cpu")
        cls = _accelerator_class(name)
        if not cls.is_available():
            raise ConfigError(
                f"trainer.accelerator: {accelerator!r} is not available on this machine; "
                f"available: {', '.join(_available_accelerators())}",
                key="trainer.accelerator",
            )
        _check_devices(config_get(trainer, "devices"), name, cls)
        resolved = _accelerator_class(name).__name__.lower().removesuffix("accelerator")
        check_precision(config_get(trainer, "precision"), resolved)
    strategy = config_get(trainer, "strategy")
    if isinstance(strategy, str) and strategy.lower() != _AUTO:
        valid = StrategyRegistry.available_strategies()
        if strategy.lower() not in valid:
            hint = closest(strategy.lower(), valid)
            raise ConfigError(
                f"trainer.strategy: unknown strategy {strategy!r}"
                + (f" (did you mean {hint!r}?)" if hint else "")
                + f"; valid: auto, {', '.join(n for n in valid if not _variant(n))} (and "
                f"their *_find_unused_parameters_* / *_stage_* variants)",
                key="trainer.strategy",
            )


def _variant(name: str) -> bool:
    return "_find_unused_parameters_" in name or "_stage_" in name


def output_dirs(trainer: Any) -> Iterator[tuple[str, str]]:
    """``(key, path)`` of every folder the trainer writes to: ``default_root_dir``, each
    logger's ``save_dir``/``root_dir`` and each callback's ``dirpath``."""
    root = config_get(trainer, "default_root_dir")
    if root:
        yield "trainer.default_root_dir", str(root)
    loggers = config_get(trainer, "logger")
    entries = loggers if isinstance(loggers, list) else [loggers]
    for i, entry in enumerate(entries):
        args = config_get(entry, "init_args") if entry is not None else None
        prefix = "trainer.logger" + (f"[{i}]" if isinstance(loggers, list) else "")
        for name in ("save_dir", "root_dir"):
            value = config_get(args, name) if args is not None else None
            if value:
                yield f"{prefix}.init_args.{name}", str(value)
    for i, callback in enumerate(config_get(trainer, "callbacks") or []):
        args = (
            config_get(callback, "init_args")
            if isinstance(callback, Mapping) or hasattr(callback, "get")
            else None
        )
        value = config_get(args, "dirpath") if args is not None else None
        if value:
            yield f"trainer.callbacks[{i}].init_args.dirpath", str(value)


SEED_MAX = 2**32 - 1  # numpy's seeds, which Lightning's seed_everything sets too


def check_seed(seed: Any) -> None:
    """``seed_everything``: a bool (true draws a seed) or an integer numpy accepts."""
    if seed is None or isinstance(seed, bool):
        return
    if not is_int(seed) or not 0 <= seed <= SEED_MAX:
        raise ConfigError(
            f"seed_everything must be true, false or an integer in [0, {SEED_MAX}], got {seed!r}",
            key="seed_everything",
        )


def check_trainer(trainer: Any) -> None:
    """Every check of this module on a parsed ``trainer`` section.

    Args:
        trainer: The ``trainer`` section (a jsonargparse ``Namespace`` or a dict).

    Raises:
        ConfigError: The first value that cannot work, naming ``trainer.<key>``.
    """
    if trainer is None:
        return
    check_numbers(trainer)
    check_hardware(trainer)
    for key, path in output_dirs(trainer):
        check_output_dir(key, path)


__all__ = [
    "check_hardware",
    "check_numbers",
    "check_output_dir",
    "check_precision",
    "check_seed",
    "check_trainer",
    "count_or_fraction_types",
    "duration_seconds",
    "output_dirs",
]


SYNC_BATCHNORM_DEVICES = ("cuda", "xpu", "hpu")
"""Device types on which ``torch.nn.SyncBatchNorm`` synchronises (torch refuses others)."""


def check_sync_batchnorm(trainer: Any) -> None:
    """``trainer.sync_batchnorm`` needs a device ``SyncBatchNorm`` supports.

    The papers' configs train with ``sync_batchnorm: true`` (BatchNorm statistics over the
    global batch, as the releases do). ``torch.nn.SyncBatchNorm`` synchronises only on
    CUDA, XPU and HPU devices and raises in the first training step of a multi-process
    CPU run, so that run is refused here, before anything is trained.

    Args:
        trainer: The built ``Trainer``.

    Raises:
        ConfigError: ``sync_batchnorm`` with several processes on another device type.
    """
    if layer_sync(trainer) is None or trainer.world_size < 2:
        return
    device = trainer.strategy.root_device.type
    if device not in SYNC_BATCHNORM_DEVICES:
        raise ConfigError(
            f"trainer.sync_batchnorm: SyncBatchNorm runs on GPUs only (torch supports "
            f"{', '.join(SYNC_BATCHNORM_DEVICES)}), and this run trains {trainer.world_size} "
            f"processes on {device}; set --trainer.sync_batchnorm false (each process then "
            "normalises by its own batch)",
            key="trainer.sync_batchnorm",
        )
