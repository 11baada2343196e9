"""What ``ncl-cli`` needs to pick up a checkpoint: where this run's checkpoints are, which
one ``last`` means, and which values the user typed.

Resuming (``fit``) and evaluating (``test``, ``validate``, ``predict``) rebuild the model
from the checkpoint's hyper-parameters. Only what the user types on the **command line**
(``--model.init_args.temperature 0.5``) overrides them: the config file of a resumed run
is usually the one it was started with, so a value there that differs from the
checkpoint's (the run was started with a command-line override) is not the user asking
for a change. Those are kept from the checkpoint and named in one notice.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from jsonargparse import Namespace
from lightning.pytorch.utilities import rank_zero_info

from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.runtime.overrides import Change
from ncl_lightning.runtime.run_search import run_checkpoints, select_checkpoint
from ncl_lightning.runtime.runs import config_entries, is_folder_logger, short_path

DEFAULT_LOGGER_NAME = "lightning_logs"


def run_roots(cfg: Any, run_id: str | None) -> tuple[list[Any], list[Path], list[Path]]:
    """Where this run's checkpoints can be.

    Args:
        cfg: The subcommand's parsed config (``trainer``, ``model``, ...).
        run_id: The run's id, if it has one.

    Returns:
        ``(roots, homes, fixed)``: the folders to search; the folder holding this
        experiment's runs (``<save_dir>/<name>`` of the first logger, when it is a CSV,
        TensorBoard or W&B logger), which keeps other experiments of a shared root out; and the
        configured ``ModelCheckpoint`` ``dirpath`` s, which stay candidates.
    """
    trainer = cfg.get("trainer") or {}
    root = trainer.get("default_root_dir")
    # Without one, Lightning writes under the working directory: search only its run
    # folders there, never the whole tree (it may hold datasets).
    cwd = Path.cwd()  # logger-less runs: <cwd>/<run id>/checkpoints
    own = [cwd / run_id] if run_id else sorted(cwd.glob("run-*"))
    roots = [root] if root else [cwd / "lightning_logs", cwd / "checkpoints", *own]
    loggers = config_entries(trainer.get("logger"))
    homes = []
    for entry in loggers:
        roots.append(entry["init_args"].get("save_dir"))
    if loggers and is_folder_logger(loggers[0]):
        init_args = loggers[0]["init_args"]
        save_dir = init_args.get("save_dir") or root or cwd
        name = init_args.get("name", DEFAULT_LOGGER_NAME)
        if str(loggers[0]["class_path"]).endswith("WandbLogger"):  # run name, else project
            project = init_args.get("project") or os.environ.get("WANDB_PROJECT")
            name = name or project or DEFAULT_LOGGER_NAME
        homes.append(Path(save_dir) / name if name else Path(save_dir))
    fixed = []
    for callback in config_entries(trainer.get("callbacks") or []):
        dirpath = callback["init_args"].get("dirpath")
        if dirpath:
            roots.append(dirpath)
            fixed.append(Path(dirpath))
    return roots, homes, fixed


def resolve_ckpt_path(cfg: Any, sub: str, run_id: str | None) -> Path | None:
    """The checkpoint ``--ckpt_path`` (or ``--auto_resume``) names, checked to exist.

    Returns:
        The file; ``None`` to start afresh, or for ``best``/``hpc``/``registry``, which
        Lightning resolves itself.

    Raises:
        ConfigError: An empty path, a missing file, or ``last`` that finds none or
            several runs.
    """
    given = cfg.get("ckpt_path")
    auto = sub == "fit" and cfg.get("auto_resume")
    if given is not None and not str(given).strip():
        raise ConfigError(
            "ckpt_path: empty path; give a checkpoint file or 'last', or drop --ckpt_path "
            "to start a new run",
            key="ckpt_path",
        )
    if given is None and not auto:
        return None
    if given in (None, "last"):
        roots, homes, fixed = run_roots(cfg, run_id)
        where = ", ".join(dict.fromkeys(short_path(r) for r in roots if r))
        candidates = run_checkpoints(roots)
        last = select_checkpoint(candidates, run_id, given == "last", where, homes, fixed)
        if last is None:
            run = f" of run {run_id}" if run_id else ""
            rank_zero_info(f"auto_resume: no last checkpoint{run} found; starting a new run")
            return None
        if sub == "fit" and not cfg.get("new_run"):
            rank_zero_info(f"Resuming from {last}")
        return last
    if given in ("best", "hpc", "registry"):
        return None  # Lightning resolves these itself
    path = Path(given).expanduser()
    if not path.is_file():
        raise ConfigError(f"ckpt_path: checkpoint not found: {path}", key="ckpt_path")
    return path


def typed_model_keys(args: Sequence[str] | dict[str, Any] | None) -> list[str] | None:
    """The model keys typed on the command line, relative to ``model``.

    Args:
        args: The command line (``sys.argv[1:]`` when ``None``) or, from Python, a dict
            (everything in it counts as typed).

    Returns:
        Dotted keys (``init_args.temperature``); ``None`` when the whole model was given
        (``--model NCL``, a dict, ``--model '{...}'``).
    """
    if args is None or isinstance(args, dict):
        return None if isinstance(args, dict) else typed_model_keys(sys.argv[1:])
    keys = []
    for token in args:
        if token == "--model" or token.startswith("--model="):
            return None
        if token.startswith("--model."):
            key = token[len("--model.") :].split("=", 1)[0].rstrip("+")
            if key == "class_path":
                return None
            keys.append(key)
    return keys


def split_explicit(explicit: Namespace, typed: Iterable[str] | None) -> tuple[Namespace, Namespace]:
    """``(typed on the command line, from the config files)`` parts of ``explicit``.

    Args:
        explicit: The model arguments the user gave (``parse_args(..., defaults=False)``).
        typed: [`typed_model_keys`][].
    """
    if typed is None:
        return explicit, Namespace()
    cli, files = Namespace(), explicit.clone()
    for typed_key in typed:
        key = _resolve_key(explicit, typed_key)
        if key is not None:
            cli[key] = explicit[key]
            if key in files:  # a key typed twice, or under a class typed whole
                del files[key]
    return cli, files


def _resolve_key(namespace: Namespace, key: str) -> str | None:
    """``key`` as stored in ``namespace``: jsonargparse takes ``--model.checkpoint`` for
    ``--model.init_args.checkpoint`` (and likewise at every nested class)."""
    parts: list[str] = []
    node: Any = namespace
    for part in key.split("."):
        if not isinstance(node, Namespace):
            return None
        if part not in node and isinstance(node.get("init_args"), Namespace):
            parts.append("init_args")
            node = node["init_args"]
        if part not in node:
            return None
        parts.append(part)
        node = node[part]
    return ".".join(parts)


def describe_kept(changes: Sequence[Change]) -> str:
    """``key=checkpoint value (config file: value), ...`` for the notice."""
    return ", ".join(f"{key}={old!r} (config file: {new!r})" for key, old, new in changes)


__all__ = [
    "describe_kept",
    "resolve_ckpt_path",
    "run_roots",
    "split_explicit",
    "typed_model_keys",
]
