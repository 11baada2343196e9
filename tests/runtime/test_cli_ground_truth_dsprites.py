"""The dSprites disentanglement configs (CL and NCL, with views that keep the factors and
with SimCLR's views) through the real ``ncl-cli`` entry point."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ncl_lightning.data import DSpritesDataModule, SimCLRSpriteViews, SpriteAugmentation
from ncl_lightning.nn import SpriteEncoder
from ncl_lightning.runtime.cli import cli_main
from tests.conftest import ROOT

CONFIGS = {
    name: ROOT / "configs" / "ground_truth" / f"dsprites_{name}.yaml"
    for name in ("cl", "ncl", "simclr_cl", "simclr_ncl")
}


@pytest.mark.parametrize("views", ["", "simclr_"])
def test_configs_differ_only_in_the_method(views: str):
    cl, ncl = (yaml.safe_load(CONFIGS[views + n].read_text()) for n in ("cl", "ncl"))
    assert cl["data"] == ncl["data"] and cl["trainer"]["max_epochs"] == ncl["trainer"]["max_epochs"]
    cl_args, ncl_args = cl["model"]["init_args"], dict(ncl["model"]["init_args"])
    assert ncl_args.pop("nonneg") == "relu"
    assert cl_args == ncl_args
    assert (cl["model"]["class_path"], ncl["model"]["class_path"]) == (
        "ncl_lightning.methods.CL",
        "ncl_lightning.methods.NCL",
    )


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_config_fast_dev_run_logs_mig(name: str, tmp_path: Path) -> None:
    args = [
        "fit",
        "--config", str(CONFIGS[name]),
        "--trainer.fast_dev_run", "2",
        "--trainer.accelerator", "cpu",
        "--trainer.enable_progress_bar", "false",
        "--trainer.default_root_dir", str(tmp_path / "run"),
        "--data.init_args.train_size", "64",
        "--data.init_args.val_size", "32",
        "--data.init_args.test_size", "16",
        "--data.init_args.batch_size", "16",
    ]  # fmt: skip
    cli = cli_main(args)
    assert cli.trainer.state.finished
    assert isinstance(cli.datamodule, DSpritesDataModule)
    assert isinstance(cli.model.backbone, SpriteEncoder)
    assert cli.model.hparams.num_classes == 0 and cli.model.online is None
    metrics = cli.trainer.callback_metrics
    assert {"train/loss", "val/z/mig", "val/h/mig", "val/z/mig/pos_x", "val/z/sparsity"} <= set(
        metrics
    )
    assert 0.0 <= metrics["val/z/mig"].item() <= 1.0
    views = cli.datamodule.views
    assert isinstance(views, SimCLRSpriteViews if "simclr" in name else SpriteAugmentation)


def test_simclr_configs_differ_from_the_others_only_in_the_views():
    for method in ("cl", "ncl"):
        names = (method, f"simclr_{method}")
        ours, simclr = (yaml.safe_load(CONFIGS[n].read_text()) for n in names)
        assert ours["model"] == simclr["model"]
        ours_data, simclr_data = dict(ours["data"]["init_args"]), dict(simclr["data"]["init_args"])
        assert "max_shift" in ours_data.pop("augmentation")
        assert simclr_data.pop("augmentation")["crop_scale"] == [0.08, 1.0]
        assert ours_data == simclr_data
        assert ours["trainer"]["max_epochs"] == simclr["trainer"]["max_epochs"]
