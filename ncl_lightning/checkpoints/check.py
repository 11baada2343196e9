"""One validator for every checkpoint reader: structure first, then the class paths.

[`read_checkpoint`][ncl_lightning.checkpoints.load.read_checkpoint], the one reader of every
checkpoint, calls [`check_structure`][] and [`check_class_paths`][] before anything else
looks at the file's contents. A class path read from a file is imported only if its module
is trusted (importing runs its code): this package and the libraries it builds on, modules
the user's own config names (``ncl-cli`` passes them), and modules listed in
``$NCL_TRUSTED_MODULES`` (comma-separated, e.g. ``mylab.models``). Nothing is imported to
make the check.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from contextvars import ContextVar
from pathlib import Path
from typing import Any

import torch

from ncl_lightning.checkpoints.record import RECORD_KEY
from ncl_lightning.foundation.errors import NCLError

TRUSTED_ENV = "NCL_TRUSTED_MODULES"
TRUSTED_PACKAGES = (
    "ncl_lightning", "torch", "torchvision", "torchmetrics", "lightning", "lightning_fabric",
    "pytorch_lightning", "timm",
)  # fmt: skip
DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$")
CLASS_KEYS = ("class_path", "_class_path")
_TRUSTED_HERE: ContextVar[tuple[str, ...]] = ContextVar("ncl_trusted_modules", default=())


class CheckpointError(NCLError, ValueError):
    """A checkpoint that is unsafe, damaged, foreign or does not fit the module asked for."""


class CheckpointNotFoundError(CheckpointError, FileNotFoundError):
    """No checkpoint file at the path given."""


# What each entry of a checkpoint must be, where present: (type(s), how to say it).
TOP_LEVEL: dict[str, tuple[type | tuple[type, ...], str]] = {
    "state_dict": (dict, "a mapping of parameter names to tensors"),
    RECORD_KEY: (dict, "a mapping (the ncl-lightning record)"),
    "hyper_parameters": (dict, "a mapping of the module's arguments"),
    "datamodule_hyper_parameters": (dict, "a mapping of the DataModule's arguments"),
    "epoch": (int, "an integer"),
    "global_step": (int, "an integer"),
    "optimizer_states": (list, "a list"),
    "lr_schedulers": (list, "a list"),
    "loops": (dict, "a mapping"),
    "callbacks": (dict, "a mapping"),
}
RECORD: dict[str, tuple[type | tuple[type, ...], str]] = {
    "backbone": ((dict, type(None)), "a {class_path, init_args} mapping or null"),
    "loggers": (list, "a list of {class, version} mappings"),
    "run": (dict, "a {id, folder} mapping"),
    "format": (int, "an integer"),
}


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    name = type(value).__name__
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


def _damaged(path: Path | str, where: str, value: Any, expected: str) -> CheckpointError:
    return CheckpointError(
        f"{path}: damaged checkpoint: '{where}' is {_kind(value)}, expected {expected}",
        key="ckpt_path",
    )


def _check_entries(
    found: Mapping[str, Any], rules: Mapping[str, Any], path: Path | str, prefix: str
) -> None:
    for key, (types, expected) in rules.items():
        if key in found and not isinstance(found[key], types):
            raise _damaged(path, f"{prefix}{key}", found[key], expected)
        if types is int and isinstance(found.get(key), bool):
            raise _damaged(path, f"{prefix}{key}", found[key], expected)


def check_structure(ckpt: Any, path: Path | str) -> dict[str, Any]:
    """Refuse a checkpoint whose entries are not what ncl-lightning writes.

    Args:
        ckpt: What ``torch.load(path, weights_only=True)`` returned.
        path: The file, for the message.

    Returns:
        ``ckpt``, known to be a mapping with a ``state_dict`` of tensors and a record.

    Raises:
        CheckpointError: Naming the first entry that is missing or of the wrong kind.
    """
    if not isinstance(ckpt, dict):
        raise CheckpointError(
            f"{path}: damaged checkpoint: the file holds {_kind(ckpt)}, expected a mapping "
            "with 'state_dict' and 'ncl_lightning' entries",
            key="ckpt_path",
        )
    if RECORD_KEY not in ckpt:
        keys = sorted(str(k) for k in ckpt)[:8]
        raise CheckpointError(
            f"{path} is not an ncl-lightning checkpoint (no '{RECORD_KEY}' record; found "
            f"{keys}); train with ncl-cli or an ncl_lightning module (a weights-only save "
            "has no record)",
            key="ckpt_path",
        )
    if "state_dict" not in ckpt:
        raise CheckpointError(
            f"{path}: damaged checkpoint: no 'state_dict' entry (the weights); found "
            f"{sorted(str(k) for k in ckpt)[:8]}",
            key="ckpt_path",
        )
    _check_entries(ckpt, TOP_LEVEL, path, "")
    for name, value in ckpt["state_dict"].items():
        if not isinstance(name, str) or not isinstance(value, torch.Tensor):
            raise _damaged(path, f"state_dict.{name}", value, "a tensor")
    record = ckpt[RECORD_KEY]
    _check_entries(record, RECORD, path, f"{RECORD_KEY}.")
    backbone = record.get("backbone") or {}
    if not isinstance(backbone.get("init_args") or {}, dict):
        raise _damaged(path, f"{RECORD_KEY}.backbone.init_args", backbone["init_args"], "a mapping")
    for i, entry in enumerate(record.get("loggers") or []):
        if not (isinstance(entry, dict) and isinstance(entry.get("version"), str | int)):
            raise _damaged(path, f"{RECORD_KEY}.loggers[{i}]", entry,
                           "a {class, version} mapping")  # fmt: skip
    run = record.get("run")
    if isinstance(run, dict) and not all(isinstance(run.get(k), str) for k in ("id", "folder")):
        raise _damaged(path, f"{RECORD_KEY}.run", run, "a mapping of 'id' and 'folder' strings")
    return ckpt


@contextlib.contextmanager
def trusting(modules: Iterable[str]) -> Iterator[None]:
    """Trust ``modules`` too while the block runs: ``ncl-cli`` trusts the modules of the
    classes its config names while it builds the model (an evaluation module reading a
    pre-training checkpoint of the user's own backbone)."""
    token = _TRUSTED_HERE.set((*_TRUSTED_HERE.get(), *modules))
    try:
        yield
    finally:
        _TRUSTED_HERE.reset(token)


def modules_of(class_paths: Iterable[str]) -> list[str]:
    """The module part of each dotted class path (``mylab.nets.Net`` -> ``mylab.nets``)."""
    return [p.rpartition(".")[0] for p in class_paths if isinstance(p, str) and "." in p]


def is_trusted(class_path: str, extra: Iterable[str] = ()) -> bool:
    """Whether ``class_path`` (or a module path) lies in a trusted module: of
    ``TRUSTED_PACKAGES``, ``$NCL_TRUSTED_MODULES``, an enclosing [`trusting`][] or ``extra``."""
    env = [m.strip() for m in os.environ.get(TRUSTED_ENV, "").split(",") if m.strip()]
    trusted = [*TRUSTED_PACKAGES, *env, *_TRUSTED_HERE.get(), *extra]
    return any(class_path == t or class_path.startswith(f"{t}.") for t in trusted)


def class_paths_in(obj: Any, where: str = "") -> Iterator[tuple[str, Any]]:
    """``(where, class path)`` of every ``class_path`` value nested in ``obj`` (mappings,
    lists, jsonargparse namespaces)."""
    if hasattr(obj, "items"):
        for key, value in obj.items():
            name = f"{where}.{key}" if where else str(key)
            if key in CLASS_KEYS:
                yield name, value
            else:
                yield from class_paths_in(value, name)
    elif isinstance(obj, list | tuple):
        for i, value in enumerate(obj):
            yield from class_paths_in(value, f"{where}[{i}]")


def check_class_paths(
    ckpt: Mapping[str, Any], path: Path | str, trusted: Iterable[str] = ()
) -> None:
    """Refuse a checkpoint naming a class whose module is not trusted (module docstring):
    the record's method, backbone and loggers, and each ``class_path`` in its (and its
    DataModule's) hyper-parameters.

    Args:
        ckpt: A checkpoint that passed [`check_structure`][].
        path: The file, for the message.
        trusted: Module prefixes trusted besides [`is_trusted`][]'s (``ncl-cli`` passes
            the modules of the classes the user's config names).

    Raises:
        CheckpointError: Naming the entry, the class path and how to trust its module.
    """
    trusted = tuple(trusted)
    record = ckpt.get(RECORD_KEY) or {}
    found = [(f"{RECORD_KEY}.method", record["method"])] if "method" in record else []
    found += class_paths_in(record.get("backbone") or {}, f"{RECORD_KEY}.backbone")
    for i, entry in enumerate(record.get("loggers") or []):
        found.append((f"{RECORD_KEY}.loggers[{i}].class", entry.get("class")))
    for key in ("hyper_parameters", "datamodule_hyper_parameters"):
        found += class_paths_in(ckpt.get(key) or {}, key)
    for where, value in found:
        if not isinstance(value, str) or not DOTTED.match(value):
            raise _damaged(path, where, value, "a dotted class path (module.Class)")
        if not is_trusted(value, trusted):
            module = value.rpartition(".")[0]
            raise CheckpointError(
                f"{path}: '{where}' names class {value!r} from a module that is not trusted "
                f"(not imported: importing runs its code); if you trust this checkpoint, "
                f"set {TRUSTED_ENV}={module}",
                key="ckpt_path",
            )


def run_record(ckpt: Mapping[str, Any]) -> dict[str, str] | None:
    """The run identity a checkpoint carries (``{"id", "folder"}``), if it records one."""
    run = (ckpt.get(RECORD_KEY) or {}).get("run")
    return run if isinstance(run, dict) else None


__all__ = [
    "RECORD_KEY",
    "TRUSTED_ENV",
    "TRUSTED_PACKAGES",
    "CheckpointError",
    "CheckpointNotFoundError",
    "check_class_paths",
    "check_structure",
    "class_paths_in",
    "is_trusted",
    "modules_of",
    "run_record",
    "trusting",
]
