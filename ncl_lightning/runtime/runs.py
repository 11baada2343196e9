"""Run identity: every training run has its own id and folder, and a resume finds *its* run.

A run's folder is where Lightning puts its checkpoints: ``<save_dir>/<name>/<version>``
of the first logger (CSV: ``version_N``; W&B: the run id), else
``<default_root_dir>/<run id>``. Its **id** is the folder's name.

Several runs may share a root (two seeds, two ablations, the tasks of a SLURM array in
``runs/cifar10_ncl``). ``--ckpt_path last`` and ``--auto_resume true`` therefore never
take "the newest ``last.ckpt`` anywhere under the root":

* with a run id (``--run_id``, ``$NCL_RUN_ID``, or under SLURM ``slurm-<job>`` /
  ``slurm-<array job>_<task>``, which a requeued job keeps) they take that run's last
  checkpoint, and a new run with that id is started when it has none (``auto_resume``);
* without one they take the only run of the root that has a last checkpoint, and refuse,
  naming every candidate, when there are several.

A run id also names the run's folders (each logger's ``version``, so the CSV folder and
the W&B run id are the run id), and a new run is refused when a folder of its id already
holds a run: nothing of an earlier run is overwritten.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import secrets
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ncl_lightning.runtime.checkpoint_io import is_partial
from ncl_lightning.runtime.errors import ConfigError

RUN_ID_ENV = "NCL_RUN_ID"
RUN_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
LAST_NAME = re.compile(r"^last(-v\d+)?\.ckpt$")
CHECKPOINT_FOLDER = "checkpoints"
INTERACTIVE_SLURM_JOBS = ("bash", "interactive")  # as Lightning's SLURMEnvironment.detect


def check_run_id(run_id: str) -> str:
    """``run_id`` if it can name a folder and a W&B run: letters, digits, ``.``, ``_``,
    ``-``, at most 64 characters, starting with a letter or digit.

    Raises:
        ConfigError: Naming ``run_id`` and the rule.
    """
    if not isinstance(run_id, str) or not RUN_ID_PATTERN.match(run_id):
        raise ConfigError(
            f"run_id: {run_id!r} cannot name a run folder and a W&B run; use letters, digits, "
            "'.', '_' and '-' (at most 64, starting with a letter or digit)",
            key="run_id",
        )
    return run_id


def slurm_job(env: Mapping[str, str] = os.environ) -> str | None:
    """The id ``scontrol requeue`` takes for this SLURM batch job (``<array job>_<task>``
    for an array task), or ``None`` outside one (an interactive allocation runs many
    things: it is no job of its own here)."""
    if not env.get("SLURM_NTASKS") or env.get("SLURM_JOB_NAME") in INTERACTIVE_SLURM_JOBS:
        return None
    array_job, task = env.get("SLURM_ARRAY_JOB_ID"), env.get("SLURM_ARRAY_TASK_ID")
    return f"{array_job}_{task}" if array_job and task else env.get("SLURM_JOB_ID") or None


def slurm_run_id(env: Mapping[str, str] = os.environ) -> str | None:
    """``slurm-<job id>`` (``slurm-<array job>_<task>`` for an array task) of a SLURM batch
    job, or ``None`` outside one (an interactive allocation runs many things: no id).

    With ``SLURM_CLUSTER_NAME`` set the cluster is part of it (``slurm-<cluster>-<job>``):
    job ids are unique on one cluster only, and a W&B run with the id of an existing run
    of the project would continue that run.
    """
    job = slurm_job(env)
    if not job:
        return None
    cluster = re.sub(r"[^A-Za-z0-9._-]", "-", env.get("SLURM_CLUSTER_NAME", ""))[:24]
    return f"slurm-{cluster}-{job}" if cluster else f"slurm-{job}"


def default_run_id(env: Mapping[str, str] = os.environ) -> tuple[str, str] | None:
    """``(run id, where it came from)`` named by the environment: ``$NCL_RUN_ID``, else the
    SLURM job (:func:`slurm_run_id`); ``None`` when neither names one."""
    if env.get(RUN_ID_ENV):
        return check_run_id(env[RUN_ID_ENV]), f"${RUN_ID_ENV}"
    slurm = slurm_run_id(env)
    return (slurm, "the SLURM job") if slurm else None


def new_run_id() -> str:
    """A fresh id: the start time and 6 random hex digits, e.g. ``run-20261124-053012-3fa9c1``."""
    return f"run-{dt.datetime.now():%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"


def run_folder_of(checkpoint: Path) -> Path:
    """The run folder of a checkpoint file: the parent of its ``checkpoints`` folder, else
    the folder holding it."""
    parent = checkpoint.parent
    return parent.parent if parent.name == CHECKPOINT_FOLDER else parent


def checkpoint_folder(root: Path, run_id: str | None, resumed: str | Path | None) -> Path:
    """Where a run without a logger keeps its checkpoints: ``<root>/<run id>/checkpoints``.

    Args:
        root: ``trainer.default_root_dir``.
        run_id: The run's id, if it has one.
        resumed: The checkpoint the run resumes from: a run of ``root`` keeps its folder.

    Returns:
        The folder; a new id (:func:`new_run_id`) names it when nothing else does.
    """
    if run_id is None and resumed is not None:
        folder = run_folder_of(Path(resumed).resolve())
        run_id = folder.name if folder.parent == root.resolve() else None
    return root / (run_id or new_run_id()) / CHECKPOINT_FOLDER


def run_checkpoints(roots: Iterable[str | Path | None]) -> dict[Path, Path]:
    """``{run folder: its newest last checkpoint}`` of every run under ``roots``.

    Args:
        roots: Folders of the runs (``default_root_dir``, logger ``save_dir`` s,
            ``ModelCheckpoint`` ``dirpath`` s); missing ones are skipped.

    Returns:
        One entry per run folder holding a ``last.ckpt`` (or ``last-vN.ckpt``); temporary
        files of an interrupted atomic write are never returned.
    """
    found: dict[Path, Path] = {}
    for root in roots:
        if root is None or not Path(root).is_dir():
            continue
        for path in Path(root).rglob("last*.ckpt"):
            if not LAST_NAME.match(path.name) or is_partial(path):
                continue
            folder = run_folder_of(path.resolve())
            best = found.get(folder)
            if best is None or path.stat().st_mtime > best.stat().st_mtime:
                found[folder] = path
    return found


def _describe(candidates: Mapping[Path, Path]) -> str:
    def when(path: Path) -> str:
        return dt.datetime.fromtimestamp(path.stat().st_mtime).strftime("%Y-%m-%d %H:%M")

    ordered = sorted(candidates.items(), key=lambda item: item[0].name)
    return "; ".join(f"{folder.name} ({_short(last)}, {when(last)})" for folder, last in ordered)


def _short(path: Path) -> str:
    relative = os.path.relpath(path)
    return str(path) if relative.startswith("..") else relative


def select_checkpoint(
    candidates: Mapping[Path, Path], run_id: str | None, required: bool, where: str
) -> Path | None:
    """The last checkpoint to resume from, among the runs of :func:`run_checkpoints`.

    Args:
        candidates: ``{run folder: newest last checkpoint}``.
        run_id: The run to resume (its folder's name), or ``None``: the only run there is.
        required: ``--ckpt_path last`` (no checkpoint is an error) rather than
            ``--auto_resume`` (no checkpoint starts a new run).
        where: The searched roots, for the messages.

    Returns:
        The checkpoint, or ``None`` (start a new run).

    Raises:
        ConfigError: Several runs and no id to choose one (every candidate is named), or
            ``required`` and nothing to resume.
    """
    if run_id is not None:
        mine = {folder: last for folder, last in candidates.items() if folder.name == run_id}
        if mine:
            return max(mine.values(), key=lambda p: p.stat().st_mtime)
        if required:
            others = f"; runs with one: {_describe(candidates)}" if candidates else ""
            raise ConfigError(
                f"ckpt_path: 'last' but run {run_id} has no last.ckpt under {where}{others}",
                key="ckpt_path",
            )
        return None
    if len(candidates) > 1:
        raise ConfigError(
            f"ckpt_path: {len(candidates)} runs under {where} have a last.ckpt, so 'last' is "
            f"ambiguous: {_describe(candidates)}; choose one with --run_id <id> or "
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


def logger_folder(logger: Any, default_root_dir: str | Path) -> Path | None:
    """The folder of ``logger``'s run where Lightning puts its checkpoints:
    ``<save_dir>/<name>/<version>`` (``version_N`` for an int version); ``None`` while a
    W&B run has no id yet."""
    log_dir = getattr(logger, "log_dir", None)  # CSV, TensorBoard: nothing is created
    if isinstance(log_dir, str | Path):
        return Path(log_dir)
    version = logger.version
    if not isinstance(version, str | int):
        return None
    version = version if isinstance(version, str) else f"version_{version}"
    return Path(logger.save_dir or default_root_dir) / str(logger.name or "") / version


def set_logger_versions(logger_config: Any, run_id: str) -> list[str]:
    """Give ``run_id`` as ``version`` to every configured logger that sets none (in place).

    Args:
        logger_config: ``trainer.logger`` of the parsed config (one ``{class_path,
            init_args}`` namespace, a list of them, or a bool).
        run_id: The run's id.

    Returns:
        The class names of the loggers given the id.

    Raises:
        ConfigError: A logger's configured ``version``/``id`` differs from ``run_id``.
    """
    entries = logger_config if isinstance(logger_config, list | tuple) else [logger_config]
    named = []
    for entry in entries:
        init_args = entry.get("init_args") if hasattr(entry, "get") else None
        if init_args is None:
            continue
        own = init_args.get("version") or init_args.get("id")
        name = str(entry.get("class_path", "logger")).rsplit(".", 1)[-1]
        if own is not None and str(own) != run_id:
            raise ConfigError(
                f"trainer.logger: {name} version {own!r} differs from run_id {run_id!r}; "
                "give one of them",
                key="run_id",
            )
        init_args["version"] = run_id
        named.append(name)
    return named


def check_new_run_folders(folders: Iterable[Path], run_id: str) -> None:
    """Refuse a new run whose folders already hold a run (nothing is overwritten).

    Raises:
        ConfigError: Naming the folder and the two ways on.
    """
    for folder in folders:
        if folder.is_dir() and any(folder.iterdir()):
            raise ConfigError(
                f"run_id: run {run_id} already exists ({_short(folder)}); resume it with "
                "--auto_resume true or --ckpt_path last, or give a new --run_id",
                key="run_id",
            )


__all__ = [
    "RUN_ID_ENV",
    "check_new_run_folders",
    "check_run_id",
    "checkpoint_folder",
    "default_run_id",
    "logger_folder",
    "new_run_id",
    "run_checkpoints",
    "run_folder_of",
    "select_checkpoint",
    "set_logger_versions",
    "slurm_job",
    "slurm_run_id",
]
