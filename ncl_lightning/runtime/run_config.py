"""The record of a run's set-up: the resolved config and the environment, in the run's own
folder and in W&B.

[`RunConfig`][] replaces LightningCLI's ``SaveConfigCallback``, which writes
``config.yaml`` to ``trainer.log_dir`` (for a W&B logger: the shared ``save_dir``, so a
second run replaced the first run's file). At the start of every ``ncl-cli`` command, on
rank zero, it writes into the run's folder ([`run_folder`][ncl_lightning.runtime.runs.run_folder]):

* ``config.yaml``: the whole resolved config (trainer, callbacks, model, data, seed);
* ``run.yaml``: run id and folder, command line, host, processes, SLURM job, versions of
  Python and the libraries, and the git commit of the code when it is a git checkout.

Neither file is ever overwritten: a resumed run, which starts again in the same folder,
writes ``config.1.yaml`` and ``run.1.yaml``, then ``.2``, and so on. Each W&B logger of the
run gets both as its run config (``trainer``, ``model``, ``data``, ``seed_everything``, ...
and ``run``) and a copy of ``config.yaml`` in the run's files (``ncl_config.yaml``: W&B keeps its
own run config in ``config.yaml``).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import importlib.metadata
import os
import platform
import shlex
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import lightning as L
import yaml
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.cli import SaveConfigCallback
from lightning.pytorch.loggers import WandbLogger
from lightning.pytorch.utilities import rank_zero_info

from ncl_lightning.runtime.lock import lock_path
from ncl_lightning.runtime.loggers import save_run_file
from ncl_lightning.runtime.runs import run_folder as folder_of_run

PACKAGES = (
    "ncl-lightning", "torch", "torchvision", "lightning", "torchmetrics", "jsonargparse",
    "wandb", "numpy",
)  # fmt: skip
SLURM_KEYS = (
    "SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_JOB_NAME",
    "SLURM_NTASKS", "SLURM_JOB_NUM_NODES", "SLURM_RESTART_COUNT",
)  # fmt: skip
GIT_TIMEOUT_S = 5.0
WANDB_CONFIG_FILE = "ncl_config.yaml"  # W&B's own run config is files/config.yaml


def package_versions() -> dict[str, str]:
    """``{distribution: version}`` of Python and the libraries a run depends on."""
    versions = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions


def git_state(path: str | Path) -> dict[str, Any] | None:
    """``{"commit", "dirty"}`` of the git checkout holding ``path``, or ``None`` when it is
    not in one or git is not installed (``dirty``: tracked files differ from the commit)."""

    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(
                ["git", "-C", str(path), *args],
                capture_output=True, text=True, timeout=GIT_TIMEOUT_S, check=False,
            )  # fmt: skip
        except (OSError, subprocess.TimeoutExpired):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if not commit:
        return None
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": bool(status) if status is not None else None}


def run_environment(trainer: L.Trainer, folder: Path | None) -> dict[str, Any]:
    """What ``run.yaml`` records of a run's environment (see the module docstring)."""
    package = Path(__file__).parent.parent  # the ncl_lightning folder
    code = {"ncl_lightning": git_state(package)}
    cwd_state = git_state(Path.cwd())
    if cwd_state is not None and cwd_state != code["ncl_lightning"]:
        code["working_directory"] = cwd_state
    return {
        "id": folder.name if folder is not None else None,
        "folder": str(folder) if folder is not None else None,
        "started": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "command": shlex.join(sys.argv),
        "cwd": str(Path.cwd()),
        "host": socket.gethostname(),
        "processes": {
            "world_size": trainer.world_size,
            "num_nodes": trainer.num_nodes,
            "devices_per_node": trainer.num_devices,
            "accelerator": type(trainer.accelerator).__name__,
            "strategy": type(trainer.strategy).__name__,
        },
        "slurm": {key: os.environ[key] for key in SLURM_KEYS if key in os.environ} or None,
        "versions": package_versions(),
        "git": code,
    }


def free_name(folder: Path, stem: str) -> tuple[Path, int]:
    """``<stem>.yaml``, else ``<stem>.<k>.yaml`` for the smallest free ``k >= 1``."""
    k = 0
    while (folder / (f"{stem}.yaml" if k == 0 else f"{stem}.{k}.yaml")).exists():
        k += 1
    return folder / (f"{stem}.yaml" if k == 0 else f"{stem}.{k}.yaml"), k


def run_folder(trainer: L.Trainer) -> Path | None:
    """The run's folder ([`run_folder`][ncl_lightning.runtime.runs.run_folder]: the first
    logger's, else the one holding the checkpoint folder, else ``None``), once a W&B run
    has started (rank zero): its id names the folder."""
    for logger in trainer.loggers:
        if isinstance(logger, WandbLogger):
            _ = logger.experiment
    return folder_of_run(trainer)


class RunConfig(SaveConfigCallback):
    """Write ``config.yaml`` and ``run.yaml`` into the run's folder, never overwriting, and
    give both to W&B (module docstring). Installed by ``ncl-cli``."""

    def __init__(self, parser: Any, config: Any, **kwargs: Any) -> None:
        kwargs.update(save_to_log_dir=False, overwrite=False)
        super().__init__(parser, config, **kwargs)
        self.written: list[Path] = []

    def save_config(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        """Rank zero only (Lightning calls it there): write the files, log them to W&B."""
        folder = run_folder(trainer)
        if folder is None:
            return
        folder.mkdir(parents=True, exist_ok=True)
        config_path, k = free_name(folder, "config")
        self.parser.save(self.config, config_path, skip_none=False, multifile=False)
        environment = run_environment(trainer, folder)
        run_path = folder / ("run.yaml" if k == 0 else f"run.{k}.yaml")
        run_path.write_text(yaml.safe_dump(environment, sort_keys=False))
        self.written = [config_path, run_path]
        rank_zero_info(f"Run {folder.name}: {folder} (config: {config_path.name})")
        resolved = yaml.safe_load(self.parser.dump(self.config, skip_none=False)) or {}
        resolved.pop("config", None)  # the --config file names, not settings
        for logger in trainer.loggers:
            if isinstance(logger, WandbLogger):
                logger.log_hyperparams({**resolved, "run": environment})
                save_file = getattr(logger, "save_file", None)  # ours: never stops a run
                if callable(save_file):
                    save_file(config_path, WANDB_CONFIG_FILE)
                else:
                    save_run_file(logger, config_path, WANDB_CONFIG_FILE)


class NewRunFolders(Callback):
    """Remove what a fit created when it fails before its first training batch completes.

    Some inputs can only be refused once training starts (an image that cannot be
    decoded, a cache folder that cannot be written); by then the loggers have made the
    run's folder and written ``hparams.yaml``, and [`RunConfig`][] its ``config.yaml``
    and ``run.yaml``, so the next run would become ``version_N+1``. Built before the
    run writes anything (``ncl-cli`` makes it just before the run lock), it notes which
    of the run's folders, their ancestors and lock files do not exist yet; on an exception
    before the first training batch has ended, with no checkpoint written (a
    ``last-finite.ckpt`` is kept with its folder), it removes the folders it noted, the
    lock files it noted, then each noted ancestor that is left empty, and the config files
    [`RunConfig`][] wrote into a folder that existed before. Nothing that existed
    before the run is removed.

    Args:
        folders: The run's folders ([`run_folders`][ncl_lightning.runtime.lock.run_folders]).
    """

    def __init__(self, folders: list[Path]) -> None:
        self.new = [f for f in folders if not f.exists()]
        self.locks = [lock_path(f) for f in folders if not lock_path(f).exists()]
        self.ancestors: list[Path] = []
        for folder in self.new:
            parent = folder.parent
            while not parent.exists() and parent not in self.ancestors:
                self.ancestors.append(parent)
                parent = parent.parent
        self.trained = False

    def on_train_batch_end(self, *args: Any) -> None:
        self.trained = True

    def on_exception(self, trainer: L.Trainer, pl_module: Any, exception: BaseException) -> None:
        if self.trained or any(any(f.rglob("*.ckpt")) for f in self.new if f.is_dir()):
            return
        for folder in self.new:
            if folder.exists():
                rank_zero_info(f"Removed {folder}: the run failed before its first batch")
            shutil.rmtree(folder, ignore_errors=True)
        for lock in self.locks:
            lock.unlink(missing_ok=True)
        for callback in trainer.callbacks:
            if isinstance(callback, RunConfig):
                for path in callback.written:
                    path.unlink(missing_ok=True)
        for parent in sorted(self.ancestors, key=lambda p: len(p.parts), reverse=True):
            with contextlib.suppress(OSError):
                parent.rmdir()  # only when empty: another run may have started there


__all__ = [
    "NewRunFolders", "RunConfig", "git_state", "package_versions", "run_environment",
    "run_folder",
]  # fmt: skip
