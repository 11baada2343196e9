"""The NCL paper's loss-variant configs build the loss they name and train a few steps.

``configs/cifar10_cl_l1.yaml`` (Table 5, App. D.2: CL + L1 penalty) and
``configs/cifar10_spectral_{cl,ncl}.yaml`` (App. D.1: the spectral contrastive loss) are
run through ``ncl-cli fit`` in-process with an overlay that keeps their method and loss
and swaps what needs a GPU and CIFAR-10 for the embedded digits, a small CNN and 3 steps
on the CPU; the checkpoint must load back with the same loss. Their other settings are
the CIFAR-10 CL/NCL ones, which ``tests/test_paper_configs.py`` checks against
``docs/fidelity.md``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from ncl_lightning.checkpoints.load import load_method
from ncl_lightning.losses import InfoNCEL1Loss, SpectralContrastiveLoss
from ncl_lightning.methods import CL, NCL
from ncl_lightning.runtime.cli import cli_main
from tests.conftest import ROOT

CONFIGS = ROOT / "configs"
SMALL = {
    "trainer": {
        "accelerator": "cpu", "devices": 1, "precision": "32-true", "sync_batchnorm": False,
        "max_steps": 3, "limit_val_batches": 0, "logger": False, "callbacks": [],
        "enable_checkpointing": False, "enable_progress_bar": False,
    },
    "model": {"init_args": {
        "backbone": {"class_path": "ncl_lightning.nn.SmallCNN",
                     "init_args": {"in_channels": 1, "width": 8, "out_dim": 32}},
        "proj_hidden_dim": 32, "proj_output_dim": 16, "channels_last": False,
    }},
    "data": {"class_path": "ncl_lightning.data.DigitsDataModule",
             "init_args": {"batch_size": 32, "augment_on": "device"}},
}  # fmt: skip
CASES = {
    "cifar10_cl_l1": (CL, InfoNCEL1Loss),
    "cifar10_spectral_cl": (CL, SpectralContrastiveLoss),
    "cifar10_spectral_ncl": (NCL, SpectralContrastiveLoss),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_config_trains_its_loss_a_few_steps(name: str, tmp_path: Path) -> None:
    small = tmp_path / "small.yaml"
    small.write_text(yaml.safe_dump({**SMALL, "trainer": {**SMALL["trainer"],
                                      "default_root_dir": str(tmp_path / "run")}}))  # fmt: skip
    cli = cli_main(["fit", "--config", str(CONFIGS / f"{name}.yaml"), "--config", str(small)])
    method, loss = CASES[name]
    assert type(cli.model) is method and type(cli.model.loss_fn) is loss
    assert cli.trainer.global_step == 3
    assert torch.isfinite(cli.trainer.callback_metrics["objective"])
    if name == "cifar10_cl_l1":
        assert cli.model.loss_fn.l1_weight == 0.1 and cli.model.loss_fn.temperature == 0.2
    if name == "cifar10_spectral_ncl":
        assert cli.model.hparams.nonneg == "rep_relu"
    # the evaluation protocols rebuild the method, and its loss, from the checkpoint
    cli.trainer.save_checkpoint(tmp_path / "last.ckpt")
    rebuilt = load_method(str(tmp_path / "last.ckpt"))
    assert type(rebuilt) is method and type(rebuilt.loss_fn) is loss
