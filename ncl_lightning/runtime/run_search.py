"""Finding the checkpoint ``--ckpt_path last`` and ``--auto_resume true`` continue.

The search looks under the run's roots (``default_root_dir``, the loggers' ``save_dir``,
the ``ModelCheckpoint`` ``dirpath``) for ``last.ckpt`` / ``last-vN.ckpt`` files, one per
run folder ([`run_checkpoints`][]), then picks *this* run's
([`select_checkpoint`][]): the run the id names, or the only run there. The search is
bounded, whatever a root holds: it goes ``SEARCH_DEPTH`` folders deep (where
Lightning puts checkpoints: ``<save_dir>/<name>/<version>/checkpoints/last.ckpt``),
never follows a link to a folder (no loops), never opens anything, and gives up with one
line after ``SEARCH_ENTRIES`` entries (a root that is a home or data folder).
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.runtime.checkpoint_io import is_partial
from ncl_lightning.runtime.runs import LAST_NAME, run_folder_of, short_path

SEARCH_DEPTH = 4  # <root>/<name>/<version>/checkpoints/last.ckpt
SEARCH_ENTRIES = 200_000
SHOWN_RUNS = 5


def _last_files(root: Path, budget: list[int]) -> Iterator[Path]:
    """Last checkpoints at most ``SEARCH_DEPTH`` levels below ``root``."""
    stack = [(root, 1)]
    while stack:
        folder, depth = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:  # unreadable or vanished: not a run of ours
            continue
        budget[0] -= len(entries)
        if budget[0] < 0:
            raise ConfigError(
                f"ckpt_path: searching {short_path(root)} for last.ckpt gave up after "
                f"{SEARCH_ENTRIES} entries (it holds more than runs); point "
                "trainer.default_root_dir and the logger's save_dir at the runs' folder, or "
                "give --ckpt_path <file>",
                key="ckpt_path",
            )
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    if depth < SEARCH_DEPTH:
                        stack.append((Path(entry.path), depth + 1))
                elif LAST_NAME.match(entry.name) and not is_partial(entry.name) and entry.is_file():
                    yield Path(entry.path)
            except OSError:
                continue


def run_checkpoints(roots: Iterable[str | Path | None]) -> dict[Path, Path]:
    """``{run folder: its newest last checkpoint}`` of every run under ``roots``.

    Args:
        roots: Folders of the runs (``default_root_dir``, logger ``save_dir`` s,
            ``ModelCheckpoint`` ``dirpath`` s); missing ones are skipped.

    Returns:
        One entry per run folder holding a ``last.ckpt`` (or ``last-vN.ckpt``); temporary
        files of an interrupted atomic write are never returned.

    Raises:
        ConfigError: A root holds more than ``SEARCH_ENTRIES`` entries in reach.
    """
    found: dict[Path, Path] = {}
    budget = [SEARCH_ENTRIES]
    for root in dict.fromkeys(Path(r).expanduser() for r in roots if r is not None):
        if not root.is_dir():
            continue
        for path in _last_files(root, budget):
            folder = run_folder_of(path.resolve())
            best = found.get(folder)
            if best is None or path.stat().st_mtime > best.stat().st_mtime:
                found[folder] = path
    return found


def describe_runs(candidates: Mapping[Path, Path]) -> str:
    """``id (checkpoint, time); ...`` of at most ``SHOWN_RUNS`` runs, then a count."""

    def when(path: Path) -> str:
        return dt.datetime.fromtimestamp(path.stat().st_mtime).strftime("%Y-%m-%d %H:%M")

    ordered = sorted(candidates.items(), key=lambda item: str(item[0]))
    shown = "; ".join(
        f"{folder.name} ({short_path(last)}, {when(last)})" for folder, last in ordered[:SHOWN_RUNS]
    )
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
    """The last checkpoint to resume from, among the runs of [`run_checkpoints`][].

    Args:
        candidates: ``{run folder: newest last checkpoint}``.
        run_id: The run to resume (its folder's name), or ``None``: the only run there is.
        required: ``--ckpt_path last`` (no checkpoint is an error) rather than
            ``--auto_resume`` (no checkpoint starts a new run).
        where: The searched roots, for the messages.
        homes: The folders holding this experiment's runs (``<save_dir>/<name>`` of the
            configured loggers), where known: runs of other experiments sharing the root
            (another logger ``name``) are never candidates.
        fixed: Run folders that stay candidates whatever ``homes`` says (a configured
            ``ModelCheckpoint`` ``dirpath`` outside the loggers' folders).

    Returns:
        The checkpoint, or ``None`` (start a new run).

    Raises:
        ConfigError: Several runs and no id to choose one (candidates are named), or
            ``required`` and nothing to resume.
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
                f"{describe_runs(mine)}; give the logger's name, or --ckpt_path <file>",
                key="ckpt_path",
            )
        if mine:
            return next(iter(mine.values()))
        if required:
            others = f"; runs with one: {describe_runs(candidates)}" if candidates else ""
            raise ConfigError(
                f"ckpt_path: 'last' but run {run_id} has no last.ckpt under {where}{others}",
                key="ckpt_path",
            )
        return None
    if len(candidates) > 1:
        raise ConfigError(
            f"ckpt_path: {len(candidates)} runs under {where} have a last.ckpt, so 'last' is "
            f"ambiguous: {describe_runs(candidates)}; choose one with --run_id <id> or "
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


__all__ = [
    "SEARCH_DEPTH",
    "SEARCH_ENTRIES",
    "describe_runs",
    "run_checkpoints",
    "select_checkpoint",
]
