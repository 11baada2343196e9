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

Every checkpoint records its run ([`run_identity`][]: id and folder), and a resume
continues that run only ([`check_same_run`][]): into the recorded folder, or the run
folder holding the file; ``--new_run true`` starts a new run from its state instead. The
search for ``last`` is in [`run_search`][ncl_lightning.runtime.run_search].
"""

from __future__ import annotations

import datetime as dt
import os
import re
import secrets
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ncl_lightning.foundation.errors import ConfigError

RUN_ID_ENV = "NCL_RUN_ID"
RUN_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
LAST_NAME = re.compile(r"^last(-v\d+)?\.ckpt$")
CHECKPOINT_FOLDER = "checkpoints"
# Loggers that write to ``<save_dir>/<name>/<version>``, the folder Lightning puts
# checkpoints in.
FOLDER_LOGGERS = ("CSVLogger", "TensorBoardLogger", "WandbLogger")
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
    SLURM job ([`slurm_run_id`][]); ``None`` when neither names one."""
    if env.get(RUN_ID_ENV):
        return check_run_id(env[RUN_ID_ENV]), f"${RUN_ID_ENV}"
    slurm = slurm_run_id(env)
    return (slurm, "the SLURM job") if slurm else None


def new_run_id() -> str:
    """A fresh id: the start time and 6 random hex digits, e.g. ``run-20261124-053012-3fa9c1``."""
    return f"run-{dt.datetime.now():%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"


def short_path(path: Path | str) -> str:
    """``path`` relative to the working directory when it lies below it, else as given."""
    relative = os.path.relpath(path)
    return str(path) if relative.startswith("..") else relative


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
        The folder; a new id ([`new_run_id`][]) names it when nothing else does.
    """
    if run_id is None and resumed is not None:
        folder = run_folder_of(Path(resumed).resolve())
        run_id = folder.name if folder.parent == root.resolve() else None
    return root / (run_id or new_run_id()) / CHECKPOINT_FOLDER


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


def config_entries(value: Any) -> list[Any]:
    """The ``{class_path, init_args}`` entries of a parsed ``trainer.logger`` or
    ``trainer.callbacks`` value (one entry, a list of them, a bool or ``None``) that have
    ``init_args``."""
    items = value if isinstance(value, list | tuple) else [value]
    return [e for e in items if hasattr(e, "get") and e.get("init_args") is not None]


def is_folder_logger(entry: Any) -> bool:
    """Whether a logger entry's class writes ``<save_dir>/<name>/<version>``
    (``FOLDER_LOGGERS``)."""
    return str(entry.get("class_path", "")).rsplit(".", 1)[-1] in FOLDER_LOGGERS


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
    named = []
    for entry in config_entries(logger_config):
        init_args = entry["init_args"]
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
                f"run_id: run {run_id} already exists ({short_path(folder)}); resume it with "
                "--auto_resume true or --ckpt_path last, or give a new --run_id",
                key="run_id",
            )


def run_folder(trainer: Any) -> Path | None:
    """The folder of ``trainer``'s run (module docstring): its first logger's folder, else
    the one holding its ``ModelCheckpoint`` folder; ``None`` when it has neither (a W&B
    run's id must be known: start its experiment first)."""
    for logger in trainer.loggers:
        folder = logger_folder(logger, trainer.default_root_dir)
        if folder is not None:
            return Path(folder)
    for callback in trainer.checkpoint_callbacks:
        if getattr(callback, "dirpath", None):
            return run_folder_of(Path(callback.dirpath) / "last.ckpt")
    return None


def run_identity(trainer: Any) -> dict[str, str]:
    """``{"id", "folder"}`` of ``trainer``'s run, written into every checkpoint's record
    (plain strings: tensor-only loading reads them)."""
    folder = (run_folder(trainer) or Path(trainer.default_root_dir)).expanduser().resolve()
    return {"id": folder.name, "folder": str(folder)}


def check_same_run(
    recorded: Mapping[str, str] | None, checkpoint: str | Path, folder: Path
) -> None:
    """Refuse to continue a run from a checkpoint of another run.

    A checkpoint belongs to the run its record names (``{"id", "folder"}``, see
    [`run_identity`][]) and to the run folder holding the file (a run folder moved or
    copied whole stays one run). A resume that would write into any other folder would
    mix two runs: the loggers would continue the checkpoint's versions there.

    Args:
        recorded: The checkpoint's run record, ``None`` for checkpoints written before it.
        checkpoint: The checkpoint file.
        folder: The folder this run would write to ([`run_identity`][]'s).

    Raises:
        ConfigError: Naming the checkpoint's run, its folder, this run's folder and the
            two ways on.
    """
    file_run = run_folder_of(Path(checkpoint).expanduser().resolve())
    own = {file_run}
    if recorded is not None:
        own.add(Path(recorded["folder"]).expanduser().resolve())
    if folder.resolve() in own:
        return
    run_id = recorded["id"] if recorded is not None else file_run.name
    home = Path(recorded["folder"]) if recorded is not None else file_run
    raise ConfigError(
        f"ckpt_path: {short_path(checkpoint)} belongs to run {run_id} ({short_path(home)}), "
        f"but this run would write to {short_path(folder)}; resume it with that run's "
        "trainer.default_root_dir and logger save_dir, or pass --new_run true to start a new "
        f"run from its state (nothing of run {run_id} is touched)",
        key="ckpt_path",
    )


__all__ = [
    "FOLDER_LOGGERS",
    "RUN_ID_ENV",
    "check_new_run_folders",
    "check_run_id",
    "check_same_run",
    "checkpoint_folder",
    "config_entries",
    "default_run_id",
    "is_folder_logger",
    "logger_folder",
    "new_run_id",
    "run_folder",
    "run_folder_of",
    "run_identity",
    "set_logger_versions",
    "short_path",
    "slurm_job",
    "slurm_run_id",
]
