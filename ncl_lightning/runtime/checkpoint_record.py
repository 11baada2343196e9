"""The [`CheckpointRecord`][] callback: the record every checkpoint of the package carries.

On every save it writes ``checkpoint["ncl_lightning"]``: the module's class path, how to
build its backbone (``{"class_path", "init_args"}``, so
[`load_backbone`][ncl_lightning.checkpoints.load.load_backbone] rebuilds the encoder from the file
alone), the run's logger versions (so a resume continues them,
[`ncl_lightning.runtime.resume`][]) and the run's identity (``{"id", "folder"}``, so a
resume into another run's folder is refused,
[`check_same_run`][ncl_lightning.runtime.runs.check_same_run]); and it flushes the loggers, so a
kill after this checkpoint loses no row that the resumed run will not log again.

``ncl-cli`` installs it; a plain ``Trainer`` gets it from the module's
``configure_callbacks`` (every module of the package asks for it). Lightning calls no
callback's ``on_save_checkpoint`` for a weights-only save (``save_weights_only=True``); for
those, [`TrainableModule`][ncl_lightning.methods.TrainableModule] writes the record's core itself
(no logger versions: a weights-only file cannot resume a run anyway).
"""

from __future__ import annotations

from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback

from ncl_lightning.checkpoints.record import RECORD_KEY, backbone_spec, make_record
from ncl_lightning.runtime.resume import logger_versions
from ncl_lightning.runtime.runs import run_identity


class CheckpointRecord(Callback):
    """Write the record into every checkpoint and flush the loggers (module docstring)."""

    def on_save_checkpoint(
        self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        record = make_record(pl_module, backbone_spec(pl_module))
        record["loggers"] = logger_versions(trainer.loggers)
        record["run"] = run_identity(trainer)
        for logger in trainer.loggers:
            logger.save()
        checkpoint[RECORD_KEY] = record
