"""Where ``ncl-cli`` puts a run: one layout for every command, logger and entry point.

A fit writes everything of one run into **one folder**,
``<trainer.default_root_dir>/<name>/<run id>/``:

* ``default_root_dir`` is the root of the run (the packaged configs use ``runs/`` plus
  their folder in ``configs/``, e.g. ``runs/demo``); every CSV, TensorBoard and W&B logger
  writes under it ([`follow_root`][]), so moving a run takes one option,
  ``--trainer.default_root_dir``;
* ``name`` is the logger's ``name`` (the packaged configs use their file name, e.g.
  ``digits_ncl``; W&B: the run's name, else its project);
* the run id is the logger's version: ``version_N``, ``--run_id``, the SLURM job, or the
  W&B run id.

An evaluation of a checkpoint (``test``, ``validate``, ``predict``) writes into the folder
of the run the checkpoint belongs to, under ``<stage>/version_N``
([`evaluation_folders`][]), and the run's ``ModelCheckpoint`` keeps the checkpoint's own
folder ([`keep_checkpoint_folders`][]): nothing new appears beside the run.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.utilities import rank_zero_info

from ncl_lightning.runtime.runs import (
    CHECKPOINT_FOLDER,
    config_entries,
    is_folder_logger,
    run_folder_of,
    short_path,
)

EVALUATION_STAGES = ("test", "validate", "predict")
OUR_WANDB = "ncl_lightning.runtime.loggers.WandbLogger"


def logger_entries(logger_config: Any) -> list[Any]:
    """The entries of ``trainer.logger`` whose class writes a ``<save_dir>/<name>/<version>``
    folder."""
    return [e for e in config_entries(logger_config) if is_folder_logger(e)]


def follow_root(trainer_config: Any) -> list[str]:
    """Make every folder logger write under ``trainer.default_root_dir`` (in place).

    The root is ``default_root_dir`` when it is given; when only the loggers' ``save_dir``
    is (a config of Lightning's own shape), the first ``save_dir`` becomes the root.

    Args:
        trainer_config: The parsed ``trainer`` section (a jsonargparse namespace).

    Returns:
        ``"<old> -> <root>"`` for each logger ``save_dir`` that was moved (said once, on
        rank zero).
    """
    entries = logger_entries(trainer_config.get("logger"))
    root = trainer_config.get("default_root_dir")
    if root is None:
        given = [e["init_args"].get("save_dir") for e in entries]
        root = next((str(d) for d in given if d not in (None, ".")), None)
        if root is None:
            return []
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
    return moved


def evaluation_folders(stage: str, trainer_config: Any, checkpoint: str | Path) -> Path | None:
    """Point the loggers of an evaluation into the folder of the checkpoint's run (in place).

    ``ncl-cli test --ckpt_path <run>/checkpoints/last.ckpt`` logs to
    ``<run>/test/version_N/`` (``metrics.csv``, ``config.yaml``), not to a new
    ``version_N`` beside the training run; a W&B evaluation is a W&B run of its own with
    the config's run name, its local folder ``<run>/test/<W&B run id>``.

    Args:
        stage: ``test``, ``validate`` or ``predict``.
        trainer_config: The parsed ``trainer`` section.
        checkpoint: The checkpoint evaluated.

    Returns:
        The folder the evaluations of that run go to (``<run>/<stage>``), or ``None`` for a
        checkpoint outside a run folder (no ``checkpoints`` folder) or an evaluation
        without a logger: there the config's folders (``default_root_dir``) are kept.
    """
    file = Path(checkpoint).expanduser().resolve()
    if stage not in EVALUATION_STAGES or file.parent.name != CHECKPOINT_FOLDER:
        return None
    run = run_folder_of(file)
    entries = logger_entries(trainer_config.get("logger"))
    for entry in entries:
        init_args = entry["init_args"]
        init_args["save_dir"] = str(run)
        init_args["version"] = None
        if entry["class_path"] == OUR_WANDB:  # a W&B run of its own; its name is kept
            init_args["folder"], init_args["id"] = stage, None
        else:
            init_args["name"] = stage
    return run / stage if entries else None


def lay_out_run(subcommand: str | None, config: Any) -> None:
    """Apply the layout to a parsed subcommand's config (in place): loggers under the
    root ([`follow_root`][]), an evaluation in its run's folder ([`evaluation_folders`][])."""
    if subcommand is None:
        return
    follow_root(config["trainer"])
    if subcommand in EVALUATION_STAGES and config.get("ckpt_path"):
        evaluation_folders(subcommand, config["trainer"], config["ckpt_path"])


def keep_checkpoint_folders(callbacks: list[Any], checkpoint: Mapping[str, Any]) -> None:
    """Give each ``ModelCheckpoint`` the folder its state in ``checkpoint`` names.

    An evaluation restores the callbacks' states from the checkpoint; a ``ModelCheckpoint``
    resolving a folder of its own would warn that its ``dirpath`` changed and drop the
    best-model record. Evaluations write no checkpoint, so the recorded folder is kept.
    """
    states = checkpoint.get("callbacks") or {}
    for callback in callbacks:
        if not isinstance(callback, ModelCheckpoint) or callback.dirpath is not None:
            continue
        state = states.get(callback.state_key)
        if isinstance(state, Mapping) and isinstance(state.get("dirpath"), str):
            callback.dirpath = state["dirpath"]


__all__ = [
    "EVALUATION_STAGES",
    "evaluation_folders",
    "follow_root",
    "keep_checkpoint_folders",
    "lay_out_run",
    "logger_entries",
]
