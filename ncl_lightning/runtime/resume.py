"""Resuming a killed run: its last checkpoint, and its loggers continued, not duplicated.

Checkpoints of the package record the version of every logger of the run (the CSV
``version_N``, the W&B run id; see [`ncl_lightning.checkpoints.load`][]). On resume
``ncl-cli`` gives those versions back to the configured loggers, so checkpoints and logs
go on in the same folders and the W&B run is resumed (``id`` + ``resume="allow"``). The
CSV logger deletes its ``metrics.csv`` when it starts; the rows written before the
checkpoint are read first and written back, so the file reads as if the run had never
stopped (rows after the checkpoint, which the resumed run logs again, are dropped).
"""

from __future__ import annotations

import csv
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import CSVLogger, Logger

from ncl_lightning.checkpoints.optimizer_groups import check_optimizer_groups, saved_group_sizes
from ncl_lightning.checkpoints.record import same_class
from ncl_lightning.runtime.run_search import run_checkpoints
from ncl_lightning.runtime.runs import config_entries


def find_last_checkpoint(roots: Iterable[str | Path | None]) -> Path | None:
    """The newest ``last.ckpt`` (or ``last-vN.ckpt``) of any run under ``roots``.

    Resuming picks among runs with
    [`select_checkpoint`][ncl_lightning.runtime.run_search.select_checkpoint] (never the newest of
    several runs); this is for callers that know the roots hold one.

    Args:
        roots: Folders of the run (``default_root_dir``, logger ``save_dir`` s, the
            ``ModelCheckpoint`` ``dirpath``); missing ones are skipped.

    Returns:
        The most recently written last checkpoint, or ``None``. Temporary files of an
        interrupted atomic write are never returned.
    """
    lasts = run_checkpoints(roots).values()
    return max(lasts, key=lambda p: p.stat().st_mtime, default=None)


def logger_versions(loggers: Iterable[Logger]) -> list[dict[str, Any]]:
    """``[{"class": qualified class name, "version": version}]`` of a run's loggers,
    written into checkpoints (plain strings and ints: tensor-only loading reads them)."""
    out = []
    for logger in loggers:
        version = logger.version
        if isinstance(version, str | int):
            cls = type(logger)
            out.append({"class": f"{cls.__module__}.{cls.__qualname__}", "version": version})
    return out


def continue_loggers(logger_config: Any, recorded: list[dict[str, Any]]) -> list[str]:
    """Give the recorded versions back to the configured loggers (in place).

    Loggers are matched by class in order; a logger whose ``version`` the config sets is
    left alone.

    Args:
        logger_config: ``trainer.logger`` of the parsed config: one ``{class_path,
            init_args}`` namespace, a list of them, or a bool.
        recorded: [`logger_versions`][] of the checkpoint.

    Returns:
        ``"<class> version <v>"`` for each logger continued.
    """
    pending = list(recorded)
    done = []
    for entry in config_entries(logger_config):
        class_path, init_args = entry.get("class_path"), entry["init_args"]
        match = next((r for r in pending if same_class(class_path, r["class"])), None)
        if match is None or init_args.get("version") is not None:
            continue
        pending.remove(match)
        init_args["version"] = match["version"]
        done.append(f"{class_path.rsplit('.', 1)[-1]} version {match['version']}")
    return done


def restore_csv_rows(logger: Logger, before_step: int) -> int:
    """Keep the rows a ``CSVLogger`` wrote before ``before_step`` across a resume.

    Call before the logger's experiment is created (it deletes ``metrics.csv``).

    Args:
        logger: The run's logger; anything but a ``CSVLogger`` is left alone.
        before_step: The checkpoint's ``global_step``: rows logged at earlier steps are
            kept, later ones (the interrupted epoch, logged again) dropped.

    Returns:
        The number of rows kept.
    """
    if not isinstance(logger, CSVLogger):
        return 0
    path = Path(logger.log_dir) / "metrics.csv"
    if not path.is_file():
        return 0
    with open(path, newline="") as f:
        rows = [
            r for r in csv.DictReader(f) if r.get("step") and int(float(r["step"])) < before_step
        ]
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*exists and is not empty.*")
        experiment = logger.experiment  # deletes the file; the rows are written back
    if isinstance(getattr(experiment, "metrics", None), list):  # rank zero's writer
        experiment.metrics[:0] = rows
    return len(rows)


class OptimizerGroupsCheck(Callback):
    """Refuse, in one line, a resumed fit whose optimizer state does not fit the optimizers
    the module builds now (its parameter groups changed since the checkpoint was written).

    Runs at ``on_fit_start``: the optimizers are built, and Lightning has not yet loaded
    the checkpoint's state into them (it would fail with torch's raw ``ValueError``).

    Args:
        ckpt: The checkpoint resumed (only its groups' sizes are kept).
        path: Its file, named in the refusal.
    """

    def __init__(self, ckpt: dict[str, Any], path: str | Path) -> None:
        self.saved = saved_group_sizes(ckpt)
        self.path = str(path)

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        if self.saved is not None:
            check_optimizer_groups(self.saved, list(trainer.optimizers), pl_module, self.path)


__all__ = [
    "OptimizerGroupsCheck",
    "continue_loggers",
    "find_last_checkpoint",
    "logger_versions",
    "restore_csv_rows",
]
