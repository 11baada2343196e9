"""Where a run lives: its id, its folder, its lock and the record of its set-up.

A run's folder is where Lightning puts its checkpoints
([`run_folder`][ncl_lightning.methods.record.run_folder]); its id is the folder's name
([`run_id`][]). Every folder logger writes under ``trainer.default_root_dir``
([`follow_root`][]), an evaluation's into its checkpoint's run ([`evaluation_folders`][]); a
new run never reuses a run's folder ([`check_new_run`][]) and a resume continues the
checkpoint's run only ([`check_same_run`][]), and no run leaves its root
([`check_under_root`][]). [`RunLock`][] keeps a second process out of a
training run's folders; [`RunConfig`][] records the set-up.
The layout: ``docs/runs.md``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import importlib.metadata
import os
import platform
import re
import secrets
import shlex
import shutil
import socket
import subprocess
import sys
from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import Any

import lightning as L
import yaml
from filelock import FileLock, Timeout
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.cli import SaveConfigCallback
from lightning.pytorch.loggers import WandbLogger
from lightning.pytorch.utilities import rank_zero_info

from ncl_lightning.foundation.errors import ConfigError, NCLError
from ncl_lightning.foundation.internals import batches_completed_total
from ncl_lightning.methods.record import CHECKPOINT_FOLDER as CHECKPOINTS
from ncl_lightning.methods.record import run_folder
from ncl_lightning.runtime.loggers import save_run_file, short_path

RUN_ID_ENV = "NCL_RUN_ID"
RUN_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
FOLDER_LOGGERS = ("CSVLogger", "TensorBoardLogger", "WandbLogger")  # <save_dir>/<name>/<version>
INTERACTIVE_SLURM_JOBS = ("bash", "interactive")  # as Lightning's SLURMEnvironment.detect
EVALUATION_STAGES = ("test", "validate", "predict")
OUR_WANDB = "ncl_lightning.runtime.loggers.WandbLogger"
LOCK_SUFFIX = ".ncl-run.lock"
PACKAGES = ("ncl-lightning", "torch", "torchvision", "lightning", "torchmetrics", "jsonargparse",
            "wandb", "numpy")  # fmt: skip
SLURM_KEYS = ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_JOB_NAME",
              "SLURM_NTASKS", "SLURM_JOB_NUM_NODES", "SLURM_RESTART_COUNT")  # fmt: skip
WANDB_CONFIG_FILE = "ncl_config.yaml"  # W&B's own run config is files/config.yaml


# -- the run id ------------------------------------------------------------------------
def slurm_job(env: Mapping[str, str] = os.environ) -> str | None:
    """The id ``scontrol requeue`` takes for this SLURM batch job (``<array job>_<task>``
    for an array task); ``None`` outside one or in an interactive allocation."""
    if not env.get("SLURM_NTASKS") or env.get("SLURM_JOB_NAME") in INTERACTIVE_SLURM_JOBS:
        return None
    array_job, task = env.get("SLURM_ARRAY_JOB_ID"), env.get("SLURM_ARRAY_TASK_ID")
    return f"{array_job}_{task}" if array_job and task else env.get("SLURM_JOB_ID") or None


def run_id(given: str | None, env: Mapping[str, str] | None = None) -> tuple[str, str] | None:
    """``(run id, where it came from)``: ``given`` (``--run_id``), else ``$NCL_RUN_ID``,
    else ``slurm-[<cluster>-]<job>`` of a SLURM batch job, in ``env`` (``None``: the
    process's); ``None`` when none names one.

    Raises:
        ConfigError: The id cannot name a folder and a W&B run.
    """
    env = os.environ if env is None else env
    if given is not None or env.get(RUN_ID_ENV):
        found = (given, "--run_id") if given is not None else (env[RUN_ID_ENV], f"${RUN_ID_ENV}")
    elif (job := slurm_job(env)) is not None:
        cluster = re.sub(r"[^A-Za-z0-9._-]", "-", env.get("SLURM_CLUSTER_NAME", ""))[:24]
        found = (f"slurm-{cluster}-{job}" if cluster else f"slurm-{job}", "the SLURM job")
    else:
        return None
    if not isinstance(found[0], str) or not RUN_ID_PATTERN.match(found[0]):
        raise ConfigError(
            f"run_id: {found[0]!r} cannot name a run folder and a W&B run; use letters, digits, "
            "'.', '_' and '-' (at most 64, starting with a letter or digit)",
            key="run_id",
        )
    return found


def config_entries(value: Any) -> list[Any]:
    """The ``{class_path, init_args}`` entries with ``init_args`` of a parsed
    ``trainer.logger`` or ``trainer.callbacks`` value (one, a list, a bool or ``None``)."""
    items = value if isinstance(value, list | tuple) else [value]
    return [e for e in items if hasattr(e, "get") and e.get("init_args") is not None]


def is_folder_logger(entry: Any) -> bool:
    """Whether a logger entry's class writes ``<save_dir>/<name>/<version>``."""
    return str(entry.get("class_path", "")).rsplit(".", 1)[-1] in FOLDER_LOGGERS


def set_logger_versions(logger_config: Any, run_id: str) -> None:
    """Give ``run_id`` as ``version`` to every configured logger (in place).

    Raises:
        ConfigError: A logger's configured ``version``/``id`` differs from ``run_id``.
    """
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


# -- the run folder ([`run_folder`][ncl_lightning.methods.record.run_folder]) ---------------
def place_checkpoints(trainer: Any, run_id: str | None, resumed: str | Path | None) -> None:
    """A run without a logger keeps its checkpoints in ``<root>/<run id>/checkpoints``:
    the id given, else the folder of the resumed checkpoint when it is a run of the root,
    else a new ``run-<date>-<time>-<6 hex digits>``."""
    root = Path(trainer.default_root_dir)
    if run_id is None and resumed is not None:
        folder = run_folder(Path(resumed).resolve())
        run_id = folder.name if folder.parent == root.resolve() else None
    run_id = run_id or f"run-{dt.datetime.now():%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"
    for callback in trainer.checkpoint_callbacks:
        callback.dirpath = callback.dirpath or str(root / run_id / CHECKPOINTS)


def _folders(trainer: Any) -> list[Path]:
    """Every folder a fit writes: the run folder, each ``ModelCheckpoint`` ``dirpath``
    given, else ``default_root_dir``."""
    found = [run_folder(trainer)]
    found += [Path(c.dirpath) for c in trainer.checkpoint_callbacks if c.dirpath]
    found = [f for f in found if f is not None] or [Path(trainer.default_root_dir)]
    return list(dict.fromkeys(p.expanduser().resolve() for p in found))


def check_new_run(trainer: Any, run_id: str | None) -> None:
    """Refuse a new run whose folders already hold a run (nothing is overwritten): with a
    run id, every folder the fit writes; else the run folder its loggers name (a
    ``version`` given in the config or on the command line).

    Raises:
        ConfigError: Naming the folder and the ways on.
    """
    if run_id is None:
        folder = _own_folder(trainer)
        if folder is not None and folder.is_dir() and any(folder.iterdir()):
            raise ConfigError(
                f"trainer.logger: the run folder {short_path(folder)} already holds a run; "
                "resume it with --ckpt_path last (or its checkpoint file), or drop the "
                "logger's version for a new run",
                key="trainer.logger",
            )
        return
    for folder in _folders(trainer):
        if folder.is_dir() and any(folder.iterdir()):
            raise ConfigError(
                f"run_id: run {run_id} already exists ({short_path(folder)}); resume it with "
                "--auto_resume true or --ckpt_path last, or give a new --run_id",
                key="run_id",
            )


def _lexical(path: str | Path) -> Path:
    """``path`` absolute, ``..`` resolved by its text (links are not followed)."""
    return Path(os.path.abspath(Path(path).expanduser()))


def _own_folder(trainer: Any) -> Path | None:
    """The run folder the loggers name (lexical), or ``None``: no logger names one, or it
    is the root itself (``fast_dev_run``'s stand-in logger)."""
    folder = run_folder(trainer) if trainer.loggers else None
    if folder is None or _lexical(folder) == _lexical(trainer.default_root_dir):
        return None
    return _lexical(folder)


def check_under_root(trainer: Any) -> None:
    """Refuse a fit whose loggers' run folder is not inside ``trainer.default_root_dir``: a
    logger ``name``, ``version`` or W&B ``id`` with ``..`` or an absolute path, typed or
    read back from a checkpoint's record.

    Raises:
        ConfigError: Naming the folder and the root.
    """
    here = _own_folder(trainer)
    if here is not None and not here.is_relative_to(_lexical(trainer.default_root_dir)):
        raise ConfigError(
            f"trainer.logger: the run folder {short_path(here)} is not inside "
            f"trainer.default_root_dir {short_path(trainer.default_root_dir)}; a logger's "
            "name, version and W&B id are folder names, without '..' or a leading '/'",
            key="trainer.logger",
        )


def check_same_run(
    recorded: Mapping[str, str] | None, checkpoint: str | Path, folder: Path
) -> None:
    """Refuse to continue a run from a checkpoint of another run: this run's ``folder``
    must be the one the checkpoint's record names (``None`` for old checkpoints) or the run
    folder holding the file (a run moved whole stays one run).

    Raises:
        ConfigError: Naming the checkpoint's run, both folders and the two ways on.
    """
    file_run = run_folder(Path(checkpoint).expanduser().resolve())
    own = {file_run}
    if recorded is not None:
        own.add(Path(recorded["folder"]).expanduser().resolve())
    if folder.resolve() in own:
        return
    run = recorded["id"] if recorded is not None else file_run.name
    home = Path(recorded["folder"]) if recorded is not None else file_run
    raise ConfigError(
        f"ckpt_path: {short_path(checkpoint)} belongs to run {run} ({short_path(home)}), "
        f"but this run would write to {short_path(folder)}; resume it with that run's "
        "trainer.default_root_dir and logger save_dir, or pass --new_run true to start a new "
        f"run from its state (nothing of run {run} is touched)",
        key="ckpt_path",
    )


# -- the layout ------------------------------------------------------------------------
def follow_root(trainer_config: Any) -> None:
    """Make every folder logger write under ``trainer.default_root_dir`` (in place; when
    only loggers' ``save_dir`` is given, the first becomes the root); says which moved."""
    entries = [e for e in config_entries(trainer_config.get("logger")) if is_folder_logger(e)]
    root = trainer_config.get("default_root_dir")
    if root is None:
        given = [e["init_args"].get("save_dir") for e in entries]
        root = next((str(d) for d in given if d not in (None, ".")), None)
        if root is None:
            return
        trainer_config["default_root_dir"] = root
    moved = []
    for entry in entries:
        save_dir = entry["init_args"].get("save_dir")
        if save_dir is not None and Path(save_dir) == Path(root):
            continue
        if save_dir is not None and str(save_dir) != ".":
            moved.append(f"{short_path(save_dir)} -> {short_path(root)}")
        entry["init_args"]["save_dir"] = str(root)
    if moved:
        rank_zero_info(
            "trainer.logger save_dir follows trainer.default_root_dir (one folder per run): "
            + ", ".join(moved)
        )


def evaluation_folders(stage: str, trainer_config: Any, checkpoint: str | Path | None) -> None:
    """Point an evaluation's loggers into the checkpoint's run (in place): ``<run>/<stage>/
    version_N`` (a W&B evaluation is a run of its own, local folder ``<run>/<stage>/<id>``);
    a checkpoint outside a ``checkpoints`` folder keeps the config's folders."""
    if stage not in EVALUATION_STAGES or not checkpoint:
        return
    file = Path(checkpoint).expanduser().resolve()
    if file.parent.name != CHECKPOINTS:
        return
    run = run_folder(file)
    for entry in (e for e in config_entries(trainer_config.get("logger")) if is_folder_logger(e)):
        init_args = entry["init_args"]
        init_args["save_dir"], init_args["version"] = str(run), None
        if entry["class_path"] == OUR_WANDB:  # a W&B run of its own; its name is kept
            init_args["folder"], init_args["id"] = stage, None
        else:
            init_args["name"] = stage


def keep_checkpoint_folders(callbacks: list[Any], checkpoint: Mapping[str, Any]) -> None:
    """Give each ``ModelCheckpoint`` of an evaluation the folder its state in
    ``checkpoint`` names (else Lightning warns that its ``dirpath`` changed)."""
    states = checkpoint.get("callbacks") or {}
    for callback in callbacks:
        if isinstance(callback, ModelCheckpoint) and callback.dirpath is None:
            state = states.get(callback.state_key)
            if isinstance(state, Mapping) and isinstance(state.get("dirpath"), str):
                callback.dirpath = state["dirpath"]


class MovedRun(Callback):
    """Continue a run whose folder was moved whole from ``old`` to ``new``: the
    ``ModelCheckpoint`` states in the checkpoint name files under ``old``; they are pointed
    under ``new`` before Lightning restores them (else it drops ``last_model_path`` and
    writes ``last-v1.ckpt`` beside a stale ``last.ckpt``)."""

    def __init__(self, old: Path, new: Path) -> None:
        self.old, self.new = str(old), str(new)

    def _moved(self, value: Any) -> Any:
        if isinstance(value, str) and (value == self.old or value.startswith(self.old + os.sep)):
            return self.new + value[len(self.old) :]
        if isinstance(value, dict):
            return {self._moved(k): self._moved(v) for k, v in value.items()}
        return value

    def on_load_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict) -> None:
        if self.old == self.new:
            return
        states = checkpoint.get("callbacks") or {}
        for key, state in states.items():
            if isinstance(state, dict) and "dirpath" in state:
                states[key] = self._moved(state)


# -- one process per folder --------------------------------------------------------------
class RunFolderInUseError(NCLError, OSError):
    """Another process is training in this run folder (``ncl-cli`` exits with status 2)."""


def lock_path(folder: Path) -> Path:
    """The lock file of ``folder``: ``<parent>/.<name>.ncl-run.lock``."""
    return folder.parent / f".{folder.name}{LOCK_SUFFIX}"


class RunLock(Callback):
    """Locks on a run's folders (``.<folder>.ncl-run.lock`` beside each), held until the
    fit ends or the process exits; a fit that fails before its first batch without a
    checkpoint leaves nothing behind (what existed before the run is kept).

    Args:
        folders: The run's folders ([`RunLock.of`][] a trainer's).
    """

    def __init__(self, folders: list[Path]) -> None:
        self.folders = folders
        self.new = [f for f in folders if not f.exists()]
        self.parents: list[Path] = []
        for folder in self.new:
            parent = folder.parent
            while not parent.exists() and parent not in self.parents:
                self.parents.append(parent)
                parent = parent.parent
        self._locks: list[tuple[Path, FileLock]] = []

    @classmethod
    def of(cls, trainer: Any) -> RunLock:
        """The lock of every folder ``trainer``'s fit writes (not yet acquired)."""
        return cls(_folders(trainer))

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_locks": []}  # a spawned process holds no lock of its own

    def acquire(self) -> RunLock:
        """Lock every folder (creating its parent), or none.

        Raises:
            RunFolderInUseError: A live process holds one (named, with its pid, host and
                start time); a killed holder's lock is taken over.
        """
        for folder in self.folders:
            path = lock_path(folder)
            path.parent.mkdir(parents=True, exist_ok=True)
            lock = FileLock(path, blocking=False)
            try:
                lock.acquire()
            except Timeout:
                holder = (path.read_text().strip() if path.is_file() else "") or "another process"
                self.release()
                raise RunFolderInUseError(
                    f"{folder}: another run is training in this folder ({holder}); wait for "
                    "it to end, or give this run its own folder (trainer.default_root_dir, "
                    "the logger's save_dir/version)"
                ) from None
            started = dt.datetime.now().isoformat(timespec="seconds")
            path.write_text(f"pid {os.getpid()} on {socket.gethostname()} since {started}\n")
            self._locks.append((path, lock))
        return self

    def release(self) -> None:
        """Remove the lock files and unlock."""
        for path, lock in self._locks:
            path.unlink(missing_ok=True)  # filelock retries a removed file's lock
            lock.release()
        self._locks.clear()

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        self.release()
        self._remove_empty_parents()  # a run that wrote nothing (fast_dev_run) leaves none

    def _remove_empty_parents(self) -> None:
        for parent in sorted(self.parents, key=lambda p: len(p.parts), reverse=True):
            with contextlib.suppress(OSError):
                parent.rmdir()  # only when empty: another run may have started there

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self.release()
        if batches_completed_total(trainer) or any(
            any(f.rglob("*.ckpt")) for f in self.new if f.is_dir()
        ):
            return
        for folder in self.new:
            if folder.exists():
                rank_zero_info(f"Removed {folder}: the run failed before its first batch")
            shutil.rmtree(folder, ignore_errors=True)
        for callback in trainer.callbacks:
            if isinstance(callback, RunConfig):
                for path in callback.written:
                    path.unlink(missing_ok=True)
        self._remove_empty_parents()


# -- the record of the run's set-up ---------------------------------------------------------
def git_state(path: str | Path) -> dict[str, Any] | None:
    """``{"commit", "dirty"}`` of the git checkout holding ``path`` (``dirty``: tracked
    files differ), or ``None`` outside one or without git."""

    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", "-C", str(path), *args], capture_output=True,
                                 text=True, timeout=5, check=False)  # fmt: skip
        except (OSError, subprocess.TimeoutExpired):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if not commit:
        return None
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": bool(status) if status is not None else None}


def run_environment(trainer: L.Trainer, folder: Path) -> dict[str, Any]:
    """What ``run.yaml`` records: id, folder, command, host, processes, SLURM job, the
    libraries' versions and the git commit of the package (and of the working directory)."""
    versions = {"python": platform.python_version()}
    for name in PACKAGES:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            versions[name] = importlib.metadata.version(name)
    code = {"ncl_lightning": git_state(Path(__file__).parent.parent)}
    cwd_state = git_state(Path.cwd())
    if cwd_state is not None and cwd_state != code["ncl_lightning"]:
        code["working_directory"] = cwd_state
    return {
        "id": folder.name, "folder": str(folder),
        "started": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "command": shlex.join(sys.argv), "cwd": str(Path.cwd()), "host": socket.gethostname(),
        "processes": {
            "world_size": trainer.world_size, "num_nodes": trainer.num_nodes,
            "devices_per_node": trainer.num_devices,
            "accelerator": type(trainer.accelerator).__name__,
            "strategy": type(trainer.strategy).__name__,
        },
        "slurm": {key: os.environ[key] for key in SLURM_KEYS if key in os.environ} or None,
        "versions": versions,
        "git": code,
    }  # fmt: skip


class RunConfig(SaveConfigCallback):
    """LightningCLI's ``SaveConfigCallback`` writing ``config.yaml`` and ``run.yaml`` (else
    ``config.<k>.yaml``, ``run.<k>.yaml``: never overwriting) into the run's folder, and
    both to every W&B logger."""

    def __init__(self, parser: Any, config: Any, **kwargs: Any) -> None:
        super().__init__(parser, config, **{**kwargs, "save_to_log_dir": False})
        self.written: list[Path] = []

    def save_config(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        """Rank zero only (Lightning calls it there)."""
        for logger in trainer.loggers:
            if isinstance(logger, WandbLogger):
                _ = logger.experiment  # its run id names the folder
        folder = run_folder(trainer)
        if folder is None:
            return
        folder.mkdir(parents=True, exist_ok=True)
        k = 0
        while (folder / ("config.yaml" if k == 0 else f"config.{k}.yaml")).exists():
            k += 1
        suffix = "" if k == 0 else f".{k}"
        config_path, run_path = folder / f"config{suffix}.yaml", folder / f"run{suffix}.yaml"
        self.parser.save(self.config, config_path, skip_none=False, multifile=False)
        environment = run_environment(trainer, folder)
        run_path.write_text(yaml.safe_dump(environment, sort_keys=False))
        self.written = [config_path, run_path]
        rank_zero_info(f"Run {folder.name}: {folder} (config: {config_path.name})")
        resolved = yaml.safe_load(self.parser.dump(self.config, skip_none=False)) or {}
        resolved.pop("config", None)  # the --config file names, not settings
        for logger in trainer.loggers:
            if isinstance(logger, WandbLogger):  # ours stores each setting once; Lightning's
                log = getattr(logger, "log_config", None) or logger.log_hyperparams
                log({**resolved, "run": environment})
                # ours never stops a run on a W&B fault; Lightning's: copy the file
                save = getattr(logger, "save_file", None) or partial(save_run_file, logger)
                save(config_path, WANDB_CONFIG_FILE)
