"""``trainer.sync_batchnorm`` (the papers' configs set it): converted under DDP where
``SyncBatchNorm`` runs, refused with one line naming the key where it cannot run."""

from __future__ import annotations

import lightning as L
import pytest
import torch
from lightning.pytorch.plugins import TorchSyncBatchNorm

from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.methods import NCL
from ncl_lightning.nn import ResNet
from ncl_lightning.runtime.cli import check_sync_batchnorm
from tests.helpers.cli import refused_fit


def _trainer(**kw) -> L.Trainer:
    return L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, **kw)


def test_cpu_ddp_with_sync_batchnorm_is_refused_before_fit() -> None:
    trainer = _trainer(devices=2, strategy="ddp", sync_batchnorm=True, max_epochs=1)
    with pytest.raises(ConfigError) as info:
        check_sync_batchnorm(trainer, True)
    assert info.value.key == "trainer.sync_batchnorm"
    assert "2 processes on cpu" in str(info.value) and "\n" not in str(info.value)


def test_single_process_and_plain_ddp_pass() -> None:
    check_sync_batchnorm(_trainer(devices=1, sync_batchnorm=True), True)  # nothing to synchronise
    check_sync_batchnorm(_trainer(devices=2, strategy="ddp"), False)


def test_the_conversion_reaches_every_batchnorm_of_the_model() -> None:
    # What Lightning applies in DDPStrategy.setup on GPUs: every BatchNorm of the backbone
    # becomes a SyncBatchNorm with the same statistics; the projector has none (the
    # releases' Linear-ReLU-Linear).
    model = NCL(ResNet(depth=18, stem="cifar"), batch_size=8)
    norms = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    converted = TorchSyncBatchNorm().apply(model)
    synced = [m for m in converted.modules() if isinstance(m, torch.nn.SyncBatchNorm)]
    assert len(synced) == len(norms) > 0
    assert not any(isinstance(m, torch.nn.BatchNorm1d) for m in converted.projector.modules())


def test_ncl_cli_refuses_it_with_one_line(tmp_path, capsys) -> None:
    extra = ["--trainer.devices", "2", "--trainer.strategy", "ddp", "--trainer.sync_batchnorm",
             "true", "--trainer.accelerator", "cpu"]  # fmt: skip
    line = refused_fit("digits_ncl", extra, tmp_path, capsys)
    assert "trainer.sync_batchnorm" in line and "2 processes on cpu" in line
