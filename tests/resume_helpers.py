"""A callback for the resume tests: marks and slows the second epoch so a test can kill
the training process in the middle of it."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from lightning.pytorch import Callback


class MarkSecondEpoch(Callback):
    """After batch ``after_batch`` of epoch 1, touch ``marker`` and sleep ``pause`` s per batch
    (first saving a checkpoint to ``save`` when given, as a pre-empted job does).

    Only the timing changes; what is trained is the same with or without it. Active when
    ``marker`` is given (the interrupted run); the reference run leaves it out.
    """

    def __init__(
        self, marker: str = "", after_batch: int = 3, pause: float = 0.5, save: str = ""
    ) -> None:
        self.marker = marker
        self.after_batch = after_batch
        self.pause = pause
        self.save = save

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self.marker and trainer.current_epoch == 1 and batch_idx >= self.after_batch:
            if self.save and batch_idx == self.after_batch:  # a mid-epoch checkpoint
                trainer.save_checkpoint(self.save)
            Path(self.marker).write_text(str(os.getpid()))
            time.sleep(self.pause)


def output_of(proc: subprocess.Popen) -> str:
    """The end of a started fit's output, killing it first (a test's failure message must
    never wait for a run that will not end)."""
    proc.kill()
    return proc.communicate(timeout=60)[0][-3000:]


def digits_run_config(
    run_dir: Path,
    marker: str = "",
    workers: int = 0,
    augment_on: str = "cpu",
    save: str = "",
    max_epochs: int = 2,
    pause: float = 0.5,
) -> dict:
    """A small deterministic BayesNCL run on the bundled digits (CSV log, ``last.ckpt``,
    SEPIN on as in the demo configs) whose second epoch :class:`MarkSecondEpoch` marks."""
    return {
        "seed_everything": 3,
        "trainer": {
            "accelerator": "cpu",
            "devices": 1,
            "max_epochs": max_epochs,
            "deterministic": True,
            "log_every_n_steps": 2,
            "default_root_dir": str(run_dir),
            "enable_progress_bar": False,
            "enable_model_summary": False,
            "logger": {
                "class_path": "lightning.pytorch.loggers.CSVLogger",
                "init_args": {"save_dir": str(run_dir), "name": "digits"},
            },
            "callbacks": [
                {
                    "class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                    "init_args": {"save_last": True},
                },
                {
                    "class_path": "ncl_lightning.callbacks.FeatureStatistics",
                    "init_args": {
                        "every_n_epochs": 1,
                        "spaces": ["z"],
                        "sepin": True,  # as in the demo configs: augmented views at validation
                        "sepin_max_batches": 2,
                    },
                },
                {
                    "class_path": "tests.resume_helpers.MarkSecondEpoch",
                    "init_args": {"marker": marker, "save": save, "pause": pause},
                },
            ],
        },
        "model": {
            "class_path": "ncl_lightning.methods.BayesNCL",
            "init_args": {
                "backbone": {
                    "class_path": "ncl_lightning.nn.SmallCNN",
                    "init_args": {"in_channels": 1, "width": 8, "out_dim": 32},
                },
                "proj_hidden_dim": 64,
                "proj_output_dim": 32,
                "warmup_epochs": 1,
                "knn_k": 5,
            },
        },
        "data": {
            "class_path": "ncl_lightning.data.DigitsDataModule",
            "init_args": {"batch_size": 64, "num_workers": workers, "augment_on": augment_on},
        },
    }
