"""The pieces of resume: continuing the loggers."""

from __future__ import annotations

from pathlib import Path

from jsonargparse import Namespace
from lightning.pytorch.loggers import CSVLogger

from ncl_lightning.methods.record import logger_versions
from ncl_lightning.runtime.loggers import WandbLogger
from ncl_lightning.runtime.resume import continue_loggers


def test_recorded_versions_go_back_to_matching_loggers(tmp_path: Path) -> None:
    loggers = [CSVLogger(tmp_path, version=3), WandbLogger(save_dir=tmp_path, version="abc123")]
    recorded = logger_versions(loggers)
    assert [r["version"] for r in recorded] == [3, "abc123"]
    csv, wandb = "lightning.pytorch.loggers.CSVLogger", "ncl_lightning.runtime.loggers.WandbLogger"
    config = [
        Namespace(class_path=wandb, init_args=Namespace(version=None)),
        Namespace(class_path=csv, init_args=Namespace(version=None)),
        Namespace(class_path=csv, init_args=Namespace(version=7)),
    ]
    continue_loggers(config, recorded)
    assert config[0].init_args.version == "abc123"  # the same W&B run, resumed
    assert config[1].init_args.version == 3
    assert config[2].init_args.version == 7  # set by the config: left alone
    continue_loggers(False, recorded)  # no logger: nothing to continue
