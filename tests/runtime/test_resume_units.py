"""The pieces of resume: finding the last checkpoint and continuing the loggers."""

from __future__ import annotations

import os
import time
from pathlib import Path

from jsonargparse import Namespace
from lightning.pytorch.loggers import CSVLogger

from ncl_lightning.runtime.loggers import WandbLogger
from ncl_lightning.runtime.resume import continue_loggers, find_last_checkpoint, logger_versions


def test_newest_last_checkpoint_wins_and_partial_files_are_ignored(tmp_path: Path) -> None:
    old = tmp_path / "a/version_0/checkpoints/last.ckpt"
    new = tmp_path / "b/run-id/checkpoints/last-v1.ckpt"
    for path in (old, new, tmp_path / "c/.last.ckpt.tmp-123", tmp_path / "c/epoch=3.ckpt"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x")
    past = time.time() - 100
    os.utime(old, (past, past))
    assert find_last_checkpoint([tmp_path / "missing", tmp_path]) == new
    assert find_last_checkpoint([tmp_path / "c"]) is None


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
    done = continue_loggers(config, recorded)
    assert config[0].init_args.version == "abc123"  # the same W&B run, resumed
    assert config[1].init_args.version == 3
    assert config[2].init_args.version == 7  # set by the config: left alone
    assert done == ["WandbLogger version abc123", "CSVLogger version 3"]
    assert continue_loggers(False, recorded) == []
