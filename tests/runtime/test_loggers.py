"""The W&B logger never stops training: offline fallback, sync hint, CSV after a failure."""

from __future__ import annotations

import csv
import logging
import socket
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import wandb
from wandb.sdk import wandb_setup

from ncl_lightning.data import DigitsDataModule
from ncl_lightning.methods import NCL
from ncl_lightning.nn import SmallCNN
from ncl_lightning.runtime import loggers
from ncl_lightning.runtime.loggers import WandbLogger

VALID_FORMAT_KEY = "x" * 40  # passes wandb's format check; never sent anywhere


@pytest.fixture(autouse=True)
def _fresh_wandb(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test sees wandb as a new process would: no run, settings read from its own env."""
    wandb.finish()
    # wandb reads the environment once per process; wandb.teardown() cannot be undone in 0.31
    monkeypatch.setattr(wandb_setup.singleton(), "_settings", None)
    yield
    wandb.finish()


@pytest.fixture
def no_credentials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Nowhere for wandb to find a real key: no env key, empty HOME, config dir and netrc."""
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_IDENTITY_TOKEN_FILE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Refuses (and records) every TCP connection our probe would open."""
    tried: list[Any] = []

    def refuse(address: Any, *args: Any, **kwargs: Any) -> socket.socket:
        tried.append(address)
        raise ConnectionRefusedError("network disabled in tests")

    monkeypatch.setattr(loggers.socket, "create_connection", refuse)
    return tried


def _fit(logger: WandbLogger, **trainer_kwargs: Any) -> L.Trainer:
    model = NCL(
        backbone=SmallCNN(in_channels=1, width=8, out_dim=16),
        proj_hidden_dim=32,
        proj_output_dim=16,
        num_classes=10,
        batch_size=128,
        warmup_epochs=0,
    )
    trainer = L.Trainer(
        max_epochs=1,
        limit_train_batches=2,
        limit_val_batches=1,
        accelerator="cpu",
        logger=logger,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        **trainer_kwargs,
    )
    trainer.fit(model, DigitsDataModule(batch_size=128))
    assert trainer.state.finished
    return trainer


def _messages(record: list[warnings.WarningMessage], text: str) -> list[str]:
    return [str(w.message) for w in record if text in str(w.message)]


@contextmanager
def _info_lines() -> Iterator[list[str]]:
    """The messages Lightning's loggers (``rank_zero_info``) emit inside the block."""
    lines: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("lightning.pytorch")
    logger.addHandler(handler)
    try:
        yield lines
    finally:
        logger.removeHandler(handler)


@pytest.mark.slow
def test_offline_with_invalid_key_trains_and_hints_sync_once(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    recwarn: pytest.WarningsRecorder,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """Offline as asked (WANDB_MODE=offline): one info line, not a warning; and no wandb
    warning about Lightning's ``anonymous`` argument, which the user never set."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_API_KEY", "bogus")  # wrong length: wandb refuses it online
    logger = WandbLogger(save_dir=tmp_path, project="p")
    with _info_lines() as lines:
        _fit(logger)
    runs = list(tmp_path.glob("p/*/wandb/offline-run-*"))  # in the run's folder
    assert len(runs) == 1
    assert list(runs[0].glob("run-*.wandb")), "no run data in the offline run folder"
    assert _messages(recwarn.list, "wandb sync") == []
    assert "anonymous setting" not in capfd.readouterr().err
    hints = [line for line in lines if "wandb sync" in line]
    assert len(hints) == 1
    assert hints[0].startswith("W&B offline; logging to ")
    assert hints[0].endswith(f"sync later with: wandb sync {runs[0].parent}")  # its sessions


@pytest.mark.slow
def test_online_without_key_falls_back_offline_without_network(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    recwarn: pytest.WarningsRecorder,
    no_credentials: None,
    no_network: list[Any],
) -> None:
    monkeypatch.setenv("WANDB_MODE", "online")
    _fit(WandbLogger(save_dir=tmp_path, project="p"))
    runs = list(tmp_path.glob("p/*/wandb/offline-run-*"))
    assert len(runs) == 1
    (hint,) = _messages(recwarn.list, "W&B")
    assert hint.startswith("W&B unavailable (no API key); logging offline to ")
    assert hint.endswith(f"sync later with: wandb sync {runs[0].parent}")
    assert no_network == []  # no key: not even the probe ran


def test_online_with_unreachable_host_falls_back_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, recwarn: pytest.WarningsRecorder
) -> None:
    monkeypatch.setenv("WANDB_MODE", "online")
    monkeypatch.setenv("WANDB_API_KEY", VALID_FORMAT_KEY)
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")  # discard port: refused at once
    monkeypatch.setattr(wandb, "init", _forbidden_online_init(wandb.init))
    logger = WandbLogger(save_dir=tmp_path, project="p")
    assert logger.experiment.offline
    (hint,) = _messages(recwarn.list, "W&B")
    assert hint.startswith("W&B unavailable (cannot reach http://127.0.0.1:9: ")
    assert "sync later with: wandb sync " in hint


def test_credentials_in_netrc_count(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    recwarn: pytest.WarningsRecorder,
    no_credentials: None,
) -> None:
    """A key only in ``$NETRC`` (for the host of ``WANDB_BASE_URL``) is found: the probe runs."""
    (tmp_path / "netrc").write_text(f"machine 127.0.0.1 login user password {VALID_FORMAT_KEY}\n")
    monkeypatch.setenv("WANDB_MODE", "online")
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")
    monkeypatch.setattr(wandb, "init", _forbidden_online_init(wandb.init))
    assert WandbLogger(save_dir=tmp_path, project="p").experiment.offline
    (hint,) = _messages(recwarn.list, "W&B")
    assert hint.startswith("W&B unavailable (cannot reach http://127.0.0.1:9: ")


def test_online_with_malformed_key_falls_back_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, recwarn: pytest.WarningsRecorder
) -> None:
    """wandb refuses a malformed key before any network; the run goes offline."""
    monkeypatch.setenv("WANDB_MODE", "online")
    monkeypatch.setenv("WANDB_API_KEY", "bogus")
    monkeypatch.setattr(loggers, "_unreachable", lambda url: None)  # a reachable host
    assert WandbLogger(save_dir=tmp_path, project="p").experiment.offline
    (hint,) = _messages(recwarn.list, "W&B")
    assert hint.startswith(
        "W&B unavailable (wandb.init failed: AuthenticationError: WANDB_API_KEY invalid: "
    )
    assert "sync later with: wandb sync " in hint


def test_probe_gives_up_after_its_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    """A host that never answers (DNS hanging included) costs the probe's timeout, no more."""
    monkeypatch.setattr(loggers, "PROBE_TIMEOUT_S", 0.1)

    def hang(*args: object, **kwargs: object) -> None:
        time.sleep(5)  # then fail as a hung connection does, long after the probe gave up
        raise TimeoutError("timed out")

    monkeypatch.setattr(loggers.socket, "create_connection", hang)
    assert loggers._unreachable("https://api.wandb.ai") == (
        "cannot reach https://api.wandb.ai: no answer in 0.1 s"
    )


@pytest.mark.slow
def test_wandb_failure_mid_run_continues_in_csv(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, recwarn: pytest.WarningsRecorder
) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    logger = WandbLogger(save_dir=tmp_path, project="p")
    run = logger.experiment
    calls: list[dict[str, Any]] = []
    real_log = run.log

    def log_then_fail(data: dict[str, Any], *args: Any, **kwargs: Any) -> None:
        calls.append(data)
        if len(calls) > 1:
            raise wandb.errors.CommError("connection lost")
        real_log(data, *args, **kwargs)

    monkeypatch.setattr(run, "log", log_then_fail)
    _fit(logger, log_every_n_steps=1)
    (failure,) = _messages(recwarn.list, "W&B failed")
    assert failure.startswith("W&B failed in log_metrics (CommError: connection lost); ")
    assert len(calls) == 2  # nothing more reached W&B after the failure
    metrics_csv = tmp_path / "p" / run.id / "metrics.csv"
    assert str(metrics_csv.relative_to(tmp_path)) in failure
    with metrics_csv.open() as f:
        rows = list(csv.DictReader(f))
    assert {int(row["step"]) for row in rows} >= {1}  # the steps after the first one
    assert any(row.get("train/loss") for row in rows)
    assert (metrics_csv.parent / "hparams.yaml").is_file()


def test_offline_resume_with_same_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, recwarn: pytest.WarningsRecorder
) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    with _info_lines() as lines:
        for value in (1.0, 2.0):
            logger = WandbLogger(save_dir=tmp_path, project="p", version="crashed01")
            assert logger.experiment.id == "crashed01"
            logger.log_metrics({"loss": value}, step=int(value))
            assert logger.version == "crashed01"
            wandb.finish()  # the process ends (crash) before the next session
            time.sleep(1.1)  # folders are named to the second: a restart takes longer than that
    folders = list(tmp_path.glob("p/crashed01/wandb/offline-run-*-crashed01"))
    assert len(folders) == 2
    assert all((folder / "run-crashed01.wandb").is_file() for folder in folders)
    hints = [line for line in lines if "wandb sync" in line]
    assert len(hints) == 2
    assert all(
        h.endswith("wandb sync " + str(tmp_path / "p" / "crashed01" / "wandb")) for h in hints
    )


def _forbidden_online_init(init: Any) -> Any:
    def offline_only(*args: Any, **kwargs: Any) -> Any:
        assert kwargs.get("mode") == "offline", "wandb.init tried to go online"
        return init(*args, **kwargs)

    return offline_only
