"""A clean console: line progress in a log file, no library notices our runs cause, a
summary at the end of a fit, and the interpretability numbers of every SSL fit
(the default FeatureStatistics and the validation of the last epoch)."""

from __future__ import annotations

import csv
import io
import logging
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
from lightning.pytorch.callbacks import TQDMProgressBar

from ncl_lightning.callbacks import FeatureStatistics, FinalValidation, default_feature_statistics
from ncl_lightning.foundation.progress import TIP_PREFIX, library_notices_off
from ncl_lightning.runtime import console
from ncl_lightning.runtime.cli import cli_main
from ncl_lightning.runtime.console import (
    FitSummary,
    LineProgress,
    format_metrics,
    progress_callbacks,
    summary_metrics,
)
from tests.conftest import ROOT

DEMO = ROOT / "configs" / "demo" / "digits_ncl.yaml"
# Notices every run repeated before: LightningCLI's `args` caution, the tensorboardX note,
# torch's LeafSpec deprecation inside Lightning and Lightning's advertisements.
NOTICES = ("args parameter is intended", "tensorboardX", "LeafSpec", "Tip:")


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _fake_trainer(epoch: int = 0) -> SimpleNamespace:
    return SimpleNamespace(
        loggers=[], progress_bar_metrics={"objective": 5.29612, "val/online_acc": 0.5},
        max_epochs=3, current_epoch=epoch, num_training_batches=1000, is_global_zero=True,
        sanity_checking=False,
    )  # fmt: skip


def test_line_progress_writes_one_line_per_epoch_and_one_per_interval(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    now = [0.0]
    monkeypatch.setattr(console, "monotonic", lambda: now[0])
    bar = LineProgress(interval_s=60)
    trainer = _fake_trainer()
    bar.setup(trainer, None, "fit")  # type: ignore[arg-type]
    for epoch in range(2):
        trainer.current_epoch = epoch
        bar.on_train_epoch_start(trainer, None)
        for batch in range(1000):  # 1/16 s a batch: 62.5 s an epoch, one interval line
            now[0] += 0.0625
            bar.on_train_batch_end(trainer, None, None, None, batch)
        if epoch == 1:  # only the second epoch validates
            bar.on_validation_epoch_end(trainer, None)
        bar.on_train_epoch_end(trainer, None)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 4, lines
    # the first epoch did not validate: the value left from an earlier validation is not shown
    assert lines[0] == "Epoch 1/3: batch 960/1000, 16 it/s | objective=5.296"
    assert lines[1] == "Epoch 1/3: 1000 batches in 1m02s | objective=5.296"
    assert lines[2] == "Epoch 2/3: batch 960/1000, 16 it/s | objective=5.296"
    assert lines[3] == "Epoch 2/3: 1000 batches in 1m02s | objective=5.296 val/online_acc=0.5"
    # an epoch that ran no batch (a resume from an epoch's end) writes nothing
    trainer.current_epoch = 2
    bar.on_train_epoch_start(trainer, None)
    bar.on_train_epoch_end(trainer, None)
    assert capsys.readouterr().err == ""
    # the sanity check's validation does not count as the epoch's
    bar.on_train_epoch_start(trainer, None)
    trainer.sanity_checking = True
    bar.on_validation_epoch_end(trainer, None)
    bar.on_train_batch_end(trainer, None, None, None, 0)
    bar.on_train_epoch_end(trainer, None)
    assert "val/" not in capsys.readouterr().err
    bar.disable()
    bar.on_train_epoch_end(trainer, None)
    assert capsys.readouterr().err == ""  # other ranks: nothing


def test_line_progress_only_where_the_bar_would_flood_a_file(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    (bar,) = progress_callbacks({"enable_progress_bar": None, "callbacks": None})
    assert isinstance(bar, LineProgress)
    assert progress_callbacks({"enable_progress_bar": False}) == []
    assert progress_callbacks({"callbacks": [TQDMProgressBar()]}) == []  # the user's bar wins
    monkeypatch.setattr(sys, "stderr", Terminal())
    assert progress_callbacks({}) == []  # a terminal keeps Lightning's bar


def test_format_and_choose_the_summary_metrics() -> None:
    logged = {"train/loss": 1.23456, "lr": 0.1, "val/offline_linear/acc_top1": 0.5,
              "val/z/sparsity": 0.9, "train/classifier/loss": 2.0, "flag": True}  # fmt: skip
    chosen = summary_metrics(logged)
    assert list(chosen) == [
        "train/loss", "train/classifier/loss", "val/offline_linear/acc_top1", "val/z/sparsity"
    ]  # fmt: skip
    assert format_metrics({**chosen, "flag": True, "name": "x"}) == (
        "train/loss=1.235 train/classifier/loss=2 val/offline_linear/acc_top1=0.5 "
        "val/z/sparsity=0.9"
    )


def test_library_notices_off_drops_only_the_tips_and_the_leafspec_notice() -> None:
    logger = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    records: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: records.append(record.getMessage())  # type: ignore[method-assign]
    logger.addHandler(handler)
    level, logger.level = logger.level, logging.INFO
    try:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            with library_notices_off():
                logger.info(f"{TIP_PREFIX} For seamless cloud logging, try installing litlogger")
                logger.info("GPU available: False")
                notice = "`isinstance(treespec, LeafSpec)` is deprecated"
                warnings.warn(notice, FutureWarning, stacklevel=1)
                warnings.warn(notice, UserWarning, stacklevel=1)
        logger.info(f"{TIP_PREFIX} after the block")
    finally:
        logger.removeHandler(handler)
        logger.level = level
    assert records == ["GPU available: False", f"{TIP_PREFIX} after the block"]
    assert [w.category for w in seen] == [UserWarning]  # another category is kept


def test_default_feature_statistics_are_cheap() -> None:
    stats = default_feature_statistics()
    assert type(stats) is FeatureStatistics  # a configured one counts as present
    assert (stats.every_n_epochs, stats.spaces, stats.sepin) == (1, ["z"], False)


def _fit(root: Path, *extra: str, config: Path | None = None):
    source = ["--config", str(config)] if config else [
        "--model", "NCL", "--data", "DigitsDataModule", "--model.backbone", "SmallCNN",
        "--model.backbone.in_channels", "1", "--trainer.accelerator", "cpu",
        "--seed_everything", "0",
    ]  # fmt: skip
    return cli_main([
        "fit", *source, "--trainer.default_root_dir", str(root),
        "--trainer.limit_train_batches", "3", "--trainer.limit_val_batches", "2",
        "--trainer.log_every_n_steps", "1", "--trainer.enable_model_summary", "false",
        *extra,
    ])  # fmt: skip


@pytest.mark.slow
def test_a_fit_without_statistics_gets_them_and_validates_its_last_epoch(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """``ncl-cli fit --model NCL --data DigitsDataModule``, 2 epochs, validation every 5:
    a validation row with z's statistics, progress lines bounded by the epochs, a summary."""
    caplog_lines: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: caplog_lines.append(record.getMessage())  # type: ignore[method-assign]
    logging.getLogger("lightning.pytorch").addHandler(handler)
    try:
        cli = _fit(tmp_path, "--trainer.max_epochs", "2", "--trainer.check_val_every_n_epoch", "5")
    finally:
        logging.getLogger("lightning.pytorch").removeHandler(handler)
    trainer = cli.trainer
    assert sum(isinstance(c, FeatureStatistics) for c in trainer.callbacks) == 1
    assert trainer.check_val_every_n_epoch == 5  # FinalValidation put it back
    assert sum(isinstance(c, FinalValidation) for c in trainer.callbacks) == 1
    with open(Path(trainer.logger.log_dir) / "metrics.csv") as file:
        rows = list(csv.DictReader(file))
    validated = [r for r in rows if r.get("val/z/sparsity")]
    assert [(r["epoch"], r["step"]) for r in validated] == [("1", "5")], rows
    assert validated[0]["val/z/semantic_consistency"] and validated[0]["val/online_acc"]
    err = capfd.readouterr().err
    progress = [line for line in err.splitlines() if line.startswith("Epoch ")]
    assert [line.split(" in ")[0] for line in progress] == [
        "Epoch 1/2: 3 batches", "Epoch 2/2: 3 batches"
    ]  # fmt: skip
    # only the last epoch validated (FinalValidation): only its line shows val/ values
    assert "val/" not in progress[0] and "val/online_acc=" in progress[1], progress
    assert "\r" not in err and len(err.splitlines()) <= 2 + 25, err
    summary = next(m for m in caplog_lines if m.startswith("Fit done:"))
    assert summary.startswith("Fit done: epoch 2/2, step 6")
    assert f"run folder: {trainer.logger.log_dir}" in summary
    assert "checkpoints/epoch=1-step=6.ckpt" in summary
    assert "val/z/sparsity=" in summary and "val/online_acc=" in summary
    assert sum(isinstance(c, FitSummary) for c in trainer.callbacks) == 1
    assert not any(notice in m for m in caplog_lines for notice in NOTICES), caplog_lines


@pytest.mark.slow
def test_a_demo_fit_raises_no_library_warning(tmp_path: Path) -> None:
    """Our call sites trigger no UserWarning, DeprecationWarning or FutureWarning in a short
    fit of the demo config (its own FeatureStatistics with SEPIN, TopActivations)."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        cli = _fit(
            tmp_path, "--trainer.max_epochs", "1", "--trainer.logger.init_args.save_dir",
            str(tmp_path), "--trainer.enable_progress_bar", "false", config=DEMO,
        )  # fmt: skip
    kinds = (UserWarning, DeprecationWarning, FutureWarning)
    found = [f"{w.filename}:{w.lineno}: {w.message}" for w in seen if issubclass(w.category, kinds)]
    assert found == []
    stats = [c for c in cli.trainer.callbacks if isinstance(c, FeatureStatistics)]
    assert len(stats) == 1 and stats[0].sepin  # the config's own, not the default
