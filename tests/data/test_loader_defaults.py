"""Loader defaults that fit the machine: automatic workers from the CPUs of each device
process, ``prefetch_factor`` passed to every loader, and the loader clause of the batch
line a fit prints."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import lightning as L
import pytest
import torch

from ncl_lightning.data import DigitsDataModule, DSpritesDataModule
from ncl_lightning.data.loader_defaults import (
    auto_workers,
    default_workers,
    describe_loader,
)
from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.methods import NCL
from ncl_lightning.nn import SmallCNN
from tests.methods.test_batch_lr import fit_batch_lines


def _cpus(monkeypatch: pytest.MonkeyPatch, n: int, local: int | None = None) -> None:
    """Fake ``n`` CPUs in this process' affinity mask and ``local`` local processes."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(n)), raising=False)
    if local is None:
        monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    else:
        monkeypatch.setenv("LOCAL_WORLD_SIZE", str(local))


@pytest.mark.parametrize(
    ("cpus", "local", "cpu", "device", "decoding"),
    [
        (2, None, 1, 1, 1),
        (16, None, 15, 2, 7),
        (16, 2, 7, 2, 3),
        (64, 8, 7, 2, 3),
        (4, 8, 1, 1, 1),
        (3, None, 2, 2, 1),
    ],
)
def test_default_workers_share_the_cpus(
    monkeypatch: pytest.MonkeyPatch,
    cpus: int,
    local: int | None,
    cpu: int,
    device: int,
    decoding: int,
) -> None:
    """CPUs / local processes - 1, at least 1, no fixed cap; 2 at most on the device
    pipeline; half the CPU count (at least 1) when its workers decode files (they make no
    views, and the training process keeps cores for itself)."""
    _cpus(monkeypatch, cpus, local)
    assert default_workers("cpu") == cpu
    assert default_workers("device") == device
    assert default_workers("device", reads_files=True) == decoding
    assert default_workers("cpu", reads_files=True) == cpu


def test_the_decoding_rule_is_printed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The batch line names the halved rule, with ``at least 1`` where it applies."""
    _cpus(monkeypatch, 16)
    assert auto_workers("device", reads_files=True) == (
        7,
        "auto: half of 16 CPUs / 1 process - 1: decode only with augment_on: device",
    )
    _cpus(monkeypatch, 2)
    assert auto_workers("device", reads_files=True) == (
        1,
        "auto: half of 2 CPUs / 1 process - 1, at least 1: decode only with augment_on: device",
    )


def test_the_trainer_devices_count_as_local_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Lightning's own launcher sets no ``LOCAL_WORLD_SIZE``: the trainer's devices per
    machine divide the CPUs once it is attached; the larger of the two counts wins."""
    _cpus(monkeypatch, 16)
    assert auto_workers("cpu", devices=2) == (7, "auto: 16 CPUs / 2 processes - 1")
    assert auto_workers("cpu", devices=32) == (1, "auto: 16 CPUs / 32 processes - 1, at least 1")
    assert auto_workers("device") == (2, "auto: 2 with augment_on: device")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    assert default_workers("cpu", devices=2) == 3
    monkeypatch.delenv("LOCAL_WORLD_SIZE")
    dm = DigitsDataModule(num_workers=None, pin_memory=False)  # type: ignore[arg-type]
    assert dm.num_workers == 15
    assert dm.loader_summary() == (
        "15 workers (auto: 16 CPUs / 1 process - 1), persistent, prefetch 2"
    )
    dm.trainer = SimpleNamespace(num_devices=2)  # type: ignore[assignment]
    assert dm.num_workers == 7
    assert dm.loader_summary().startswith("7 workers (auto: 16 CPUs / 2 processes - 1)")


def test_configured_workers_are_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    _cpus(monkeypatch, 16)
    dm = DigitsDataModule(num_workers=3, pin_memory=False, persistent_workers=False)
    assert dm.num_workers == 3
    assert dm.loader_summary() == "3 workers (configured), prefetch 2"


@pytest.mark.parametrize("bad", [0, -1])
def test_a_bad_prefetch_factor_fails_at_construction(bad: int) -> None:
    for build in (DigitsDataModule, DSpritesDataModule):
        with pytest.raises(ConfigError) as err:
            build(prefetch_factor=bad)
        assert str(err.value) == f"prefetch_factor must be an integer >= 1, got {bad}"
        assert err.value.key == "prefetch_factor"


def test_prefetch_factor_reaches_the_loaders() -> None:
    """Every loader with workers gets it; without workers it is left out (``DataLoader``
    refuses a ``prefetch_factor`` with ``num_workers=0``)."""
    dm = DigitsDataModule(batch_size=32, num_workers=1, prefetch_factor=4)
    dm.setup("fit")
    loaders = [dm.train_dataloader(), dm.val_dataloader(), dm.view_dataloader("val")]
    assert [(ld.num_workers, ld.prefetch_factor) for ld in loaders] == [(1, 4)] * 3
    assert dm.loader_summary().endswith("persistent, prefetch 4")
    dm = DigitsDataModule(batch_size=32, num_workers=0, prefetch_factor=4)
    dm.setup("fit")
    assert dm.train_dataloader().prefetch_factor is None
    assert dm.loader_summary().startswith("main process (num_workers: 0)")
    sprites = DSpritesDataModule(
        train_size=64, val_size=8, test_size=8, batch_size=8, num_workers=1, prefetch_factor=3
    )
    assert sprites.train_dataloader().prefetch_factor == 3
    assert sprites.val_dataloader().prefetch_factor == 3
    assert "1 worker (configured)" in sprites.loader_summary()


def test_describe_loader() -> None:
    assert describe_loader(15, "configured", True, True, None) == (
        "15 workers (configured), pinned, persistent, prefetch 2"
    )
    assert describe_loader(1, "configured", False, False, 8) == "1 worker (configured), prefetch 8"
    assert (
        describe_loader(0, "configured", True, True, 8) == "main process (num_workers: 0), pinned"
    )


def test_the_batch_line_names_the_loader(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A fit prints the loader settings once, in the batch line."""
    _cpus(monkeypatch, 2)
    torch.manual_seed(0)
    model = NCL(
        SmallCNN(1, 8, 16), proj_hidden_dim=32, proj_output_dim=16, num_classes=10,
        batch_size=None, optimizer=lambda p: torch.optim.SGD(p, lr=0.4), scale_lr=True,
    )  # fmt: skip
    data = DigitsDataModule(batch_size=32, num_workers=None, prefetch_factor=3)  # type: ignore[arg-type]
    trainer = L.Trainer(
        accelerator="cpu", max_epochs=1, limit_train_batches=1, limit_val_batches=0,
        logger=False, enable_progress_bar=False, enable_model_summary=False,
        enable_checkpointing=False, default_root_dir=tmp_path,
    )  # fmt: skip
    lines = fit_batch_lines(trainer, model, data)
    pinned = ", pinned" if torch.cuda.is_available() else ""
    assert len(lines) == 1, lines
    assert lines[0].endswith(
        f"; loader: 1 worker (auto: 2 CPUs / 1 process - 1){pinned}, persistent, prefetch 3"
    )
