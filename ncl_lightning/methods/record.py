"""The record every checkpoint of the package carries, written by the module itself.

[`write_record`][] (called from ``on_save_checkpoint``, also for a weights-only save)
puts ``checkpoint["ncl_lightning"]``: the core of
[`make_record`][ncl_lightning.checkpoints.record.make_record] (class path, backbone spec, so
[`load_backbone`][ncl_lightning.checkpoints.load.load_backbone] rebuilds the encoder from the file
alone), the run's logger versions (a resume continues them) and the run's identity
(``{"id", "folder"}``: a resume into another run's folder is refused), the DataModule's
evaluation transform (``preprocessing``: size, resize, normalisation; an export's
``config.json`` carries it); and it flushes the
loggers, so a kill after this checkpoint loses no row that the resumed run will not log
again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L

from ncl_lightning.checkpoints.record import RECORD_KEY, backbone_spec, class_path, make_record
from ncl_lightning.foundation.internals import attached_trainer

CHECKPOINT_FOLDER = "checkpoints"


def logger_versions(loggers: Any) -> list[dict[str, Any]]:
    """``[{"class": qualified class name, "version": version}]`` of a run's loggers
    (plain strings and ints: tensor-only loading reads them)."""
    out = []
    for logger in loggers:
        version = logger.version
        if isinstance(version, str | int):
            cls = type(logger)
            out.append({"class": f"{cls.__module__}.{cls.__qualname__}", "version": version})
    return out


def run_folder(of: Any) -> Path | None:
    """The run folder of a trainer or of a checkpoint file.

    A trainer's: its first logger's ``<save_dir>/<name>/<version>`` (where Lightning puts
    the checkpoints; ``None`` while a W&B run has no id yet), else the folder holding its
    ``ModelCheckpoint`` folder, else ``None``. A checkpoint file's: the parent of its
    ``checkpoints`` folder, else the folder holding it.
    """
    if isinstance(of, str | Path):
        parent = Path(of).parent
        return parent.parent if parent.name == CHECKPOINT_FOLDER else parent
    for logger in of.loggers:
        log_dir = getattr(logger, "log_dir", None)  # CSV, TensorBoard: nothing is created
        if isinstance(log_dir, str | Path):
            return Path(log_dir)
        version = logger.version
        if isinstance(version, str | int):
            version = version if isinstance(version, str) else f"version_{version}"
            return Path(logger.save_dir or of.default_root_dir) / str(logger.name or "") / version
    for callback in of.checkpoint_callbacks:
        if getattr(callback, "dirpath", None):
            return run_folder(Path(callback.dirpath) / "last.ckpt")
    return None


def run_identity(trainer: Any) -> dict[str, str]:
    """``{"id", "folder"}`` of ``trainer``'s run (plain strings), written into every
    checkpoint's record."""
    folder = (run_folder(trainer) or Path(trainer.default_root_dir)).expanduser().resolve()
    return {"id": folder.name, "folder": str(folder)}


def write_record(module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
    """Put the record into ``checkpoint`` and flush the loggers (module docstring)."""
    record = make_record(module, backbone_spec(module))
    trainer = attached_trainer(module)
    if trainer is not None:
        record["loggers"] = logger_versions(trainer.loggers)
        record["run"] = run_identity(trainer)
        record["optimizers"] = [class_path(type(o)) for o in trainer.optimizers]
        preprocessing = getattr(trainer.datamodule, "preprocessing", None)
        if callable(preprocessing):  # the evaluation transform, for an export's config
            record["preprocessing"] = preprocessing()
        for logger in trainer.loggers:
            logger.save()
    checkpoint[RECORD_KEY] = record
