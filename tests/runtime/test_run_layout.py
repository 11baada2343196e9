"""One folder per run: ``<default_root_dir>/<name>/<run id>/`` for every logger, and an
evaluation of a checkpoint inside its run's folder (``<run>/test/version_N``), through
the real ``ncl-cli`` entry point with the packaged demo config."""

from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path

import pytest
import yaml

from ncl_lightning.methods.record import run_identity
from ncl_lightning.runtime.cli import cli_main
from ncl_lightning.runtime.runs import LOCK_SUFFIX, evaluation_folders, follow_root

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "configs" / "demo" / "digits_ncl.yaml"
SHORT = [
    "--trainer.max_epochs", "1", "--trainer.limit_train_batches", "2",
    "--trainer.limit_val_batches", "1", "--trainer.enable_progress_bar", "false",
    "--trainer.enable_model_summary", "false",
]  # fmt: skip


def _files(root: Path) -> set[str]:
    """Every file under ``root`` (hidden ones included), relative, as POSIX paths."""
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def _namespace(data: dict):
    from jsonargparse import Namespace, dict_to_namespace

    return dict_to_namespace(data) if data else Namespace()


def test_loggers_follow_the_root_and_say_which_moved(caplog: pytest.LogCaptureFixture) -> None:
    trainer = _namespace({
        "default_root_dir": "/scratch/runs",
        "logger": [
            {"class_path": "lightning.pytorch.loggers.CSVLogger",
             "init_args": {"save_dir": "runs/demo", "name": "a"}},
            {"class_path": "ncl_lightning.runtime.loggers.WandbLogger",
             "init_args": {"save_dir": ".", "name": "a"}},
            {"class_path": "my.pkg.MyLogger", "init_args": {"save_dir": "elsewhere"}},
        ],
    })  # fmt: skip
    with caplog.at_level(logging.INFO):
        follow_root(trainer)
    saves = [entry.init_args.save_dir for entry in trainer.logger]
    assert saves == ["/scratch/runs", "/scratch/runs", "elsewhere"]  # not a folder logger
    said = "follows trainer.default_root_dir (one folder per run): runs/demo -> /scratch/runs\n"
    assert said in caplog.text  # W&B's default '.' moves silently


def test_without_a_root_the_first_save_dir_becomes_it() -> None:
    trainer = _namespace({
        "default_root_dir": None,
        "logger": {"class_path": "lightning.pytorch.loggers.CSVLogger",
                   "init_args": {"save_dir": "runs/x", "name": "a"}},
    })  # fmt: skip
    follow_root(trainer)
    assert trainer.default_root_dir == "runs/x"
    assert trainer.logger.init_args.save_dir == "runs/x"


def test_an_evaluation_outside_a_run_folder_keeps_the_config(tmp_path: Path) -> None:
    trainer = _namespace({
        "default_root_dir": "runs",
        "logger": {"class_path": "lightning.pytorch.loggers.CSVLogger",
                   "init_args": {"save_dir": "runs", "name": "a", "version": None}},
    })  # fmt: skip
    evaluation_folders("test", trainer, tmp_path / "model.ckpt")
    assert trainer.logger.init_args.save_dir == "runs"
    run = tmp_path / "r" / "version_3"
    evaluation_folders("fit", trainer, run / "checkpoints" / "last.ckpt")
    assert trainer.logger.init_args.save_dir == "runs"
    evaluation_folders("validate", trainer, run / "checkpoints" / "x.ckpt")
    assert (trainer.logger.init_args.save_dir, trainer.logger.init_args.name) == (
        str(run.resolve()), "validate",
    )  # fmt: skip


def test_a_wandb_evaluation_keeps_its_name_and_gets_a_folder(tmp_path: Path) -> None:
    trainer = _namespace({
        "default_root_dir": "runs",
        "logger": {"class_path": "ncl_lightning.runtime.loggers.WandbLogger",
                   "init_args": {"save_dir": "runs", "name": "cifar10_ncl", "id": "abc",
                                 "version": "abc", "folder": None}},
    })  # fmt: skip
    run = tmp_path / "cifar10_ncl" / "abc"
    evaluation_folders("test", trainer, run / "checkpoints" / "last.ckpt")
    init = trainer.logger.init_args
    assert (init.save_dir, init.folder, init.name) == (str(run.resolve()), "test", "cifar10_ncl")
    assert init.id is None and init.version is None  # a W&B run of its own


@pytest.mark.slow
def test_fit_then_test_write_one_run_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # the config's own runs/demo would be relative to here
    root = tmp_path / "elsewhere"
    cli = cli_main(["fit", "--config", str(DEMO), "--trainer.default_root_dir", str(root), *SHORT])
    run = root / "digits_ncl" / "version_0"
    assert Path(run_identity(cli.trainer)["folder"]) == run.resolve()
    assert not (tmp_path / "runs").exists()  # the config's save_dir followed the root
    files = _files(root)
    expected = {"config.yaml", "run.yaml", "hparams.yaml", "metrics.csv", "checkpoints/last.ckpt"}
    assert {f"digits_ncl/version_0/{name}" for name in expected} <= files
    assert all(f.startswith("digits_ncl/version_0/") for f in files), files
    assert not [f for f in files if f.endswith(LOCK_SUFFIX)]  # the ended run removed its lock
    assert not any(p.name.endswith(LOCK_SUFFIX) for p in root.rglob(".*"))

    last = run / "checkpoints" / "last.ckpt"
    for n in (0, 1):  # two evaluations of the run: test/version_0, test/version_1
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            cli_main(["test", "--config", str(DEMO), "--ckpt_path", str(last), *SHORT])
        said = [str(w.message) for w in caught]
        assert not [m for m in said if "dirpath has changed" in m], said
        assert (run / "test" / f"version_{n}" / "metrics.csv").is_file()
        recorded = yaml.safe_load((run / "test" / f"version_{n}" / "config.yaml").read_text())
        assert recorded["ckpt_path"] == str(last)
    assert sorted(p.name for p in (root / "digits_ncl").iterdir()) == ["version_0"]  # no version_1
    assert not (tmp_path / "runs").exists()
    header = (run / "test" / "version_0" / "metrics.csv").read_text().splitlines()[0]
    assert "test/z/sparsity" in header


@pytest.mark.slow
def test_a_wandb_run_has_the_same_layout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WANDB_MODE", "offline")
    config = yaml.safe_load(DEMO.read_text())
    config["trainer"]["logger"] = {
        "class_path": "ncl_lightning.runtime.loggers.WandbLogger",
        "init_args": {"project": "ncl-lightning", "name": "digits_ncl", "offline": True},
    }
    path = tmp_path / "digits_wandb.yaml"
    path.write_text(yaml.safe_dump(config))
    root = tmp_path / "runs"
    import wandb

    wandb.init(mode="offline", id="earlier", dir=tmp_path)  # an earlier fit in this process
    with caplog.at_level(logging.INFO):
        cli = cli_main(["fit", "--config", str(path), "--trainer.default_root_dir", str(root),
                        "--run_id", "w1", *SHORT])  # fmt: skip
    run = root / "digits_ncl" / "w1"
    assert cli.trainer.logger.experiment.id == "w1"
    assert (run / "checkpoints" / "last.ckpt").is_file()
    assert (run / "config.yaml").is_file() and (run / "run.yaml").is_file()
    assert Path(run_identity(cli.trainer)["folder"]) == run.resolve()
    offline = list((run / "wandb").glob("offline-run-*-w1"))  # W&B's own files, by W&B
    assert len(offline) == 1, os.listdir(run)
    assert sorted(p.name for p in root.iterdir()) == ["digits_ncl"]  # nothing beside the run
    assert f"run folder: {run}" in caplog.text or f"run folder: {run.relative_to(tmp_path)}" in (
        caplog.text
    )
    # the run folder printed is what the plot tool takes: it finds the W&B files (issue 47)
    from ncl_lightning.plot.metrics_csv import find_metrics

    assert find_metrics(run) == [offline[0] / "run-w1.wandb"]
