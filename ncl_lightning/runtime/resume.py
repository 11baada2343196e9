"""Resuming a run: which checkpoint ``last`` means ([`select_checkpoint`][]: this run's,
never the newest of several), its loggers continued ([`continue_loggers`][],
[`restore_csv_rows`][]), and only values typed on the command line over its
hyper-parameters ([`overlay_explicit`][]). The promises: ``docs/reliability.md``,
"Resuming a killed run" and "Resuming with a fix".
"""

from __future__ import annotations

import csv
import datetime as dt
import os
import re
import sys
import warnings
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from jsonargparse import Namespace
from lightning.pytorch.loggers import CSVLogger, Logger
from lightning.pytorch.utilities import rank_zero_info

from ncl_lightning.checkpoints.record import same_class
from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.methods.record import run_folder
from ncl_lightning.runtime.loggers import short_path
from ncl_lightning.runtime.runs import config_entries, is_folder_logger

SEARCH_DEPTH = 4  # <root>/<name>/<version>/checkpoints/last.ckpt
SEARCH_ENTRIES = 200_000
SHOWN_RUNS = 5
DEFAULT_LOGGER_NAME = "lightning_logs"
LAST_NAME = re.compile(r"^last(-v\d+)?\.ckpt$")  # never an unfinished write's temporary file

Change = tuple[str, Any, Any]  # (dotted key, checkpoint's value, this run's value)


# -- which checkpoint ------------------------------------------------------------------------
def run_checkpoints(roots: Iterable[str | Path | None]) -> dict[Path, Path]:
    """``{run folder: its newest last checkpoint}`` of every run under ``roots``: at most
    ``SEARCH_DEPTH`` folders deep, no link to a folder followed, no partial write.

    Raises:
        ConfigError: The roots hold more than ``SEARCH_ENTRIES`` entries in reach.
    """
    found: dict[Path, Path] = {}
    budget = SEARCH_ENTRIES
    for root in dict.fromkeys(Path(r).expanduser() for r in roots if r is not None):
        for folder, subfolders, files in os.walk(root):  # unreadable folders are skipped
            budget -= len(subfolders) + len(files)
            if budget < 0:
                raise ConfigError(
                    f"ckpt_path: searching {short_path(root)} for last.ckpt gave up after "
                    f"{SEARCH_ENTRIES} entries (it holds more than runs); point "
                    "trainer.default_root_dir and the logger's save_dir at the runs' folder, "
                    "or give --ckpt_path <file>",
                    key="ckpt_path",
                )
            if len(Path(folder).relative_to(root).parts) >= SEARCH_DEPTH - 1:
                subfolders.clear()
            for path in (Path(folder, f) for f in files if LAST_NAME.match(f)):
                if not path.is_file():  # a broken link
                    continue
                run = run_folder(path.resolve())
                if run not in found or path.stat().st_mtime > found[run].stat().st_mtime:
                    found[run] = path
    return found


def _describe_runs(candidates: Mapping[Path, Path]) -> str:
    """``id (checkpoint, time); ...`` of at most ``SHOWN_RUNS`` runs, then a count."""

    def when(path: Path) -> str:
        return dt.datetime.fromtimestamp(path.stat().st_mtime).strftime("%Y-%m-%d %H:%M")

    ordered = sorted(candidates.items(), key=lambda item: str(item[0]))
    shown = "; ".join(f"{f.name} ({short_path(p)}, {when(p)})" for f, p in ordered[:SHOWN_RUNS])
    more = len(ordered) - SHOWN_RUNS
    return f"{shown}; and {more} more" if more > 0 else shown


def select_checkpoint(
    candidates: Mapping[Path, Path],
    run_id: str | None,
    required: bool,
    where: str,
    homes: Iterable[Path] = (),
    fixed: Iterable[Path] = (),
) -> Path | None:
    """The last checkpoint to resume among [`run_checkpoints`][]'s, or ``None`` (new run).

    Args:
        candidates: ``{run folder: newest last checkpoint}``.
        run_id: The run to resume (its folder's name), or ``None``: the only run there is.
        required: ``--ckpt_path last`` (none is an error), not ``--auto_resume``.
        where: The searched roots, for the messages.
        homes: ``<save_dir>/<name>`` of the configured loggers, where known: runs of other
            experiments sharing the root are never candidates.
        fixed: Run folders that stay candidates (a configured ``ModelCheckpoint`` ``dirpath``).

    Raises:
        ConfigError: Several runs and no id to choose one (each named), or ``required`` and
            nothing to resume.
    """
    homes = {Path(h).expanduser().resolve() for h in homes}
    fixed = {Path(f).expanduser().resolve() for f in fixed}
    if homes:
        candidates = {f: c for f, c in candidates.items() if f.parent in homes or f in fixed}
    if run_id is not None:
        mine = {folder: last for folder, last in candidates.items() if folder.name == run_id}
        if len(mine) > 1:
            raise ConfigError(
                f"ckpt_path: {len(mine)} runs named {run_id} under {where} have a last.ckpt: "
                f"{_describe_runs(mine)}; give the logger's name, or --ckpt_path <file>",
                key="ckpt_path",
            )
        if not mine and required:
            others = f"; runs with one: {_describe_runs(candidates)}" if candidates else ""
            raise ConfigError(
                f"ckpt_path: 'last' but run {run_id} has no last.ckpt under {where}{others}",
                key="ckpt_path",
            )
        return next(iter(mine.values()), None)
    if len(candidates) > 1:
        raise ConfigError(
            f"ckpt_path: {len(candidates)} runs under {where} have a last.ckpt, so 'last' is "
            f"ambiguous: {_describe_runs(candidates)}; choose one with --run_id <id> or "
            "--ckpt_path <file>",
            key="ckpt_path",
        )
    if not candidates and required:
        raise ConfigError(
            f"ckpt_path: 'last' but no last.ckpt under {where}; drop --ckpt_path to start a "
            "new run, or use --auto_resume true",
            key="ckpt_path",
        )
    return next(iter(candidates.values()), None)


def run_roots(cfg: Any, run_id: str | None) -> tuple[list[Any], list[Path], list[Path]]:
    """``(roots, homes, fixed)`` of [`select_checkpoint`][] for a parsed subcommand config:
    the folders to search; ``<save_dir>/<name>`` of the first logger when it writes one;
    the configured ``ModelCheckpoint`` ``dirpath`` s."""
    trainer = cfg.get("trainer") or {}
    root = trainer.get("default_root_dir")
    # Without a root Lightning writes under the working directory: search only its run
    # folders there, never the whole tree (it may hold datasets).
    cwd = Path.cwd()
    own = [cwd / run_id] if run_id else sorted(cwd.glob("run-*"))
    roots = [root] if root else [cwd / DEFAULT_LOGGER_NAME, cwd / "checkpoints", *own]
    loggers = config_entries(trainer.get("logger"))
    roots += [entry["init_args"].get("save_dir") for entry in loggers]
    homes = []
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
        if dirpath := callback["init_args"].get("dirpath"):
            roots.append(dirpath)
            fixed.append(Path(dirpath))
    return roots, homes, fixed


def resolve_ckpt_path(cfg: Any, sub: str, run_id: str | None) -> Path | None:
    """The checkpoint ``--ckpt_path`` (or ``--auto_resume``) names, checked to exist;
    ``None`` to start afresh, or for ``best``/``hpc``/``registry`` (Lightning's own).

    Raises:
        ConfigError: An empty path, a missing file, or ``last`` that finds none or several runs.
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
        elif sub == "fit" and not cfg.get("new_run"):
            rank_zero_info(f"Resuming from {last}")
        return last
    if given in ("best", "hpc", "registry"):
        return None
    path = Path(given).expanduser()
    if not path.is_file():
        raise ConfigError(f"ckpt_path: checkpoint not found: {path}", key="ckpt_path")
    return path


# -- the loggers continue ----------------------------------------------------------------------
def continue_loggers(logger_config: Any, recorded: list[dict[str, Any]]) -> None:
    """Give the recorded versions back to the configured loggers (in place), matched by
    class in order; a logger whose ``version`` the config sets is left alone."""
    pending = list(recorded)
    for entry in config_entries(logger_config):
        class_path, init_args = entry.get("class_path"), entry["init_args"]
        match = next((r for r in pending if same_class(class_path, r["class"])), None)
        if match is None or init_args.get("version") is not None:
            continue
        pending.remove(match)
        init_args["version"] = match["version"]


def restore_csv_rows(logger: Logger, before_step: int) -> None:
    """Keep the rows a ``CSVLogger`` wrote before ``before_step`` (the checkpoint's
    ``global_step``) across a resume: its experiment deletes ``metrics.csv`` when created;
    they are written back. Call before the experiment exists."""
    path = Path(logger.log_dir) / "metrics.csv" if isinstance(logger, CSVLogger) else None
    if path is None or not path.is_file():
        return
    with open(path, newline="") as f:
        rows = [
            r for r in csv.DictReader(f) if r.get("step") and int(float(r["step"])) < before_step
        ]
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*exists and is not empty.*")
        experiment = logger.experiment
    if isinstance(getattr(experiment, "metrics", None), list):  # rank zero's writer
        experiment.metrics[:0] = rows


# -- the command line wins -------------------------------------------------------------------
def typed_model_keys(args: Sequence[str] | dict[str, Any] | None) -> list[str] | None:
    """The model keys typed on the command line (``sys.argv[1:]`` when ``None``), relative
    to ``model`` (``init_args.temperature``); ``None`` when the whole model was given
    (``--model NCL``, or a dict from Python: everything in it counts as typed)."""
    if isinstance(args, dict):
        return None
    keys = []
    for token in sys.argv[1:] if args is None else args:
        if token == "--model" or token.startswith("--model="):
            return None
        if token.startswith("--model."):
            key = token[len("--model.") :].split("=", 1)[0].rstrip("+")
            if key == "class_path":
                return None
            keys.append(key)
    return keys


def split_explicit(explicit: Namespace, typed: Iterable[str] | None) -> tuple[Namespace, Namespace]:
    """``(typed on the command line, from the config files)`` parts of the model arguments
    the user gave (``parse_args(..., defaults=False)``); ``typed``: [`typed_model_keys`][]."""
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
    """``key`` as stored: jsonargparse takes ``--model.checkpoint`` for
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


def overlay_explicit(target: Namespace, explicit: Namespace, prefix: str = "") -> list[Change]:
    """Put every value of ``explicit`` into ``target`` (in place; a nested object whose
    ``class_path`` differs is replaced whole). Returns the values that differed:
    ``(dotted key, target's value, explicit's value)``."""
    changes: list[Change] = []
    for key, value in vars(explicit).items():
        current = target.get(key) if isinstance(target, Namespace) else None
        name = f"{prefix}{key}"
        same = not isinstance(value, Namespace) or value.get("class_path") in (
            None,
            current.get("class_path") if isinstance(current, Namespace) else None,
        )
        if isinstance(value, Namespace) and isinstance(current, Namespace) and same:
            changes += overlay_explicit(current, value, f"{name}.")
            continue
        if _plain(current) != _plain(value):
            changes.append((name, _plain(current), _plain(value)))
        target[key] = value
    return changes


def _plain(value: Any) -> Any:
    return value.as_dict() if isinstance(value, Namespace) else value


def describe(changes: Sequence[Change], kept: bool = False) -> str:
    """``key=value (checkpoint: value), ...``; ``kept``: the checkpoint's values kept over
    the config file's, ``key=value (config file: value), ...``."""
    if kept:
        return ", ".join(f"{key}={old!r} (config file: {new!r})" for key, old, new in changes)
    return ", ".join(f"{key}={new!r} (checkpoint: {old!r})" for key, old, new in changes)
