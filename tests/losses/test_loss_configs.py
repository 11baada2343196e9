"""The NCL paper's loss-variant configs build the loss they name and train a few steps.

``configs/cifar10_spectral_{cl,ncl}.yaml`` (App. D.1: the spectral contrastive loss),
``configs/cifar10_spectral_cl_l1.yaml`` (Table 5, App. D.2: "SCL + reg") and our
``configs/cifar10_cl_l1.yaml`` (InfoNCE + L1 penalty) are run through ``ncl-cli fit``
in-process with an overlay that keeps their method, loss and optimiser and swaps what needs
a GPU and CIFAR-10 for the embedded digits, a small CNN and 3 steps on the CPU; the
checkpoint must load back with the same loss. Their other settings are checked by
``tests/test_paper_configs.py`` against ``docs/fidelity.md``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from ncl_lightning.checkpoints.load import load_method
from ncl_lightning.losses import InfoNCEL1Loss, SpectralContrastiveLoss, SpectralL1Loss
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
    "cifar10_spectral_cl_l1": (CL, SpectralL1Loss),
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
    if name.startswith("cifar10_spectral"):  # HaoChen et al.'s release: the ball of radius 1
        assert (cli.model.loss_fn.normalize, cli.model.loss_fn.mu) == ("ball", 1.0)
        assert isinstance(cli.model.optimizers().optimizer, torch.optim.SGD)
    if name == "cifar10_spectral_cl_l1":
        assert cli.model.loss_fn.l1_weight == 0.01
    # the evaluation protocols rebuild the method, and its loss, from the checkpoint
    cli.trainer.save_checkpoint(tmp_path / "last.ckpt")
    rebuilt = load_method(str(tmp_path / "last.ckpt"))
    assert type(rebuilt) is method and type(rebuilt.loss_fn) is loss
