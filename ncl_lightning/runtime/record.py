"""The :class:`CheckpointRecord` callback: the record every checkpoint of the package carries.

On every save it writes ``checkpoint["ncl_lightning"]``: the module's class path, how to
build its backbone (``{"class_path", "init_args"}``, so
:func:`~ncl_lightning.runtime.checkpoint.load_backbone` rebuilds the encoder from the file
alone), the run's logger versions (so a resume continues them,
:mod:`ncl_lightning.runtime.resume`) and the run's identity (``{"id", "folder"}``, so a
resume into another run's folder is refused, :func:`~ncl_lightning.runtime.runs.check_same_run`);
and it flushes the loggers, so a kill after this
checkpoint loses no row that the resumed run will not log again.

``ncl-cli`` installs it; a plain ``Trainer`` gets it from the module's
``configure_callbacks`` (every module of the package asks for it). Lightning calls no
callback's ``on_save_checkpoint`` for a weights-only save (``save_weights_only=True``); for
those, :class:`~ncl_lightning.methods.TrainableModule` writes the record's core itself (no
logger versions: a weights-only file cannot resume a run anyway).
"""

from __future__ import annotations

from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback
from torch import nn

from ncl_lightning.runtime.resume import logger_versions
from ncl_lightning.runtime.runs import run_identity

RECORD_KEY = "ncl_lightning"
RECORD_FORMAT = 1


def class_path(obj: type) -> str:
    """``module.QualName`` of a class, as LightningCLI writes it."""
    return f"{obj.__module__}.{obj.__qualname__}"


def spec_of(backbone: nn.Module | None, configured: Any = None) -> dict[str, Any] | None:
    """How to rebuild ``backbone``: the config's ``class_path`` dict, else its ``spec``."""
    if isinstance(configured, dict) and "class_path" in configured:
        return {
            "class_path": configured["class_path"],
            "init_args": configured.get("init_args", {}),
        }
    spec = getattr(backbone, "spec", None)
    return spec if isinstance(spec, dict) else None


def backbone_spec(module: nn.Module) -> dict[str, Any] | None:
    """``{"class_path", "init_args"}`` of ``module``'s backbone, or ``None`` if unknown.

    The module's own ``backbone_spec()`` when it has one (modules that wrap a loaded
    method), else from ``module.backbone`` and the configured ``hparams["backbone"]``
    (ncl-cli stores the config's ``class_path`` dict there).
    """
    own = getattr(module, "backbone_spec", None)
    if callable(own):
        return own()
    configured = getattr(module, "hparams", {}).get("backbone")
    return spec_of(getattr(module, "backbone", None), configured)


def make_record(module: nn.Module, spec: dict[str, Any] | None) -> dict[str, Any]:
    """The record of ``module``'s checkpoint: format, method class path, backbone spec.

    Args:
        module: The LightningModule being saved.
        spec: ``{"class_path", "init_args"}`` rebuilding ``module.backbone``, or ``None``
            when unknown (a user backbone built from Python without ``spec``).
    """
    return {"format": RECORD_FORMAT, "method": class_path(type(module)), "backbone": spec}


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
