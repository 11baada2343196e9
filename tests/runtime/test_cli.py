"""Every config through the real ``ncl-cli`` entry point, and fit -> checkpoint -> test.

Configs run with ``fast_dev_run`` on data the tests make in the real on-disk formats
(CIFAR python pickles, an ImageNet-style folder tree holding the 100 subset WNIDs) or on
scikit-learn's bundled digits; the end-to-end run uses the real CIFAR-10 images.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import wandb
import yaml
from torchvision.datasets import CIFAR10, CIFAR100

from ncl_lightning.data import load_imagenet100_classes
from ncl_lightning.methods import NCL
from ncl_lightning.runtime.cli import cli_main
from tests.conftest import ROOT
from tests.fakes import make_fake_cifar, make_image_folder

# Image pre-training configs only: tests/runtime/test_cli_eval.py runs eval and NCE/CE,
# tests/runtime/test_cli_ground_truth*.py the ground-truth studies, and
# tests/test_ablation_configs.py the ablation overlays (partial configs, configs/ablations/),
# tests/methods/test_nce_table4.py the NCE overlays (partial configs, configs/nce/overlays/).
CONFIGS = sorted(
    c
    for c in (ROOT / "configs").rglob("*.yaml")
    if not {ROOT / "configs" / d for d in ("eval", "ground_truth", "ablations")} & set(c.parents)
    and c.parent.name != "overlays"
    and yaml.safe_load(c.read_text())["model"]["class_path"]
    != "ncl_lightning.methods.NCEClassifier"
)


def _data_root(config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Make small data for the config's DataModule; return the CLI overrides pointing at it."""
    data_class = yaml.safe_load(config.read_text())["data"]["class_path"].rsplit(".", 1)[-1]
    if data_class == "DigitsDataModule":
        return []
    if data_class in ("CIFAR10DataModule", "CIFAR100DataModule"):
        cls, n = (CIFAR10, 10) if data_class == "CIFAR10DataModule" else (CIFAR100, 100)
        make_fake_cifar(tmp_path / "cifar", cls, n, monkeypatch)
        root = tmp_path / "cifar"
    elif data_class == "ImageNet100DataModule":
        root = make_image_folder(tmp_path / "imagenet", load_imagenet100_classes(), n=1)
    elif data_class == "ImageFolderDataModule":
        classes = [f"class{i}" for i in range(10)]
        root = make_image_folder(tmp_path / "folder", classes, n=1, size=(32, 32))
    else:
        raise AssertionError(f"no test data for {data_class}; add it here")
    return ["--data.init_args.root", str(root), "--data.init_args.num_workers", "0"]


# bf16-mixed autocast is slow on the CPU (imagenet100_cl: 33 s against 13 s in 32-true,
# cifar100_cl: 9 s against 2.4 s). One config per method and data path keeps the shipped
# bf16-mixed (cifar10_ncl, cifar10_bayesncl, cifar10_supcon_ncl, imagenet100_ncl and
# imagenet100_ncl_vit); these variants of them (CL: another non-negative map; CIFAR-100:
# more classes) run in 32-true.
FP32_ON_CPU = {
    "cifar10_cl", "cifar10_supcon_cl", "cifar100_cl", "cifar100_ncl", "cifar100_bayesncl",
    "imagenet100_cl", "imagenet100_bayesncl", "imagenet100_cl_vit", "imagenet100_bayesncl_vit",
}  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("config", CONFIGS, ids=[c.stem for c in CONFIGS])
def test_config_fast_dev_run(config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    precision = ["--trainer.precision", "32-true"] if config.stem in FP32_ON_CPU else []
    args = [
        "fit",
        "--config", str(config),
        "--trainer.fast_dev_run", "2",
        "--trainer.accelerator", "cpu",
        "--trainer.devices", "1",
        "--trainer.default_root_dir", str(tmp_path / "run"),
        "--trainer.enable_progress_bar", "false",
        "--data.init_args.batch_size", "4",
        *precision,
        *_data_root(config, tmp_path, monkeypatch),
    ]  # fmt: skip
    cli = cli_main(args)
    assert cli.trainer.state.finished
    assert cli.model.hparams.num_classes == cli.datamodule.num_classes
    assert cli.model.hparams.batch_size == 4
    metrics = cli.trainer.callback_metrics
    assert {"train/loss", "val/online_acc", "val/z/sparsity"} <= set(metrics)


@pytest.mark.slow
def test_fit_one_epoch_on_real_cifar_then_test(cifar_subset: Path, tmp_path: Path) -> None:
    """One epoch on the real CIFAR-10 images with the W&B logger offline, then ncl-cli test."""
    common = [
        "--config", str(ROOT / "configs" / "cifar10_ncl.yaml"),
        "--data", "ncl_lightning.data.ImageFolderDataModule",
        "--data.root", str(cifar_subset),
        "--data.batch_size", "128",
        "--data.num_workers", "2",
        # a small backbone keeps the epoch short on 2 CPU cores; the data path is the real one
        "--model.init_args.backbone", "ncl_lightning.nn.SmallCNN",
        "--model.init_args.backbone.in_channels", "3",
        "--trainer.accelerator", "cpu",
        "--trainer.devices", "1",
        # bf16-mixed autocast is slow on the CPU (most of this test's time); this test is about
        # fit -> W&B -> checkpoint -> test, and bf16 runs in test_config_fast_dev_run and the DDP
        # and performance-switch tests
        "--trainer.precision", "32-true",
        "--trainer.default_root_dir", str(tmp_path),
        "--trainer.logger.init_args.save_dir", str(tmp_path),
        "--trainer.enable_progress_bar", "false",
    ]  # fmt: skip
    fit = cli_main(["fit", *common, "--trainer.max_epochs", "1"])
    assert fit.trainer.current_epoch == 1
    ckpts = list(tmp_path.rglob("last.ckpt"))
    assert len(ckpts) == 1
    assert list(tmp_path.glob("wandb/offline-run-*")), "the W&B logger wrote no offline run"
    wandb.finish()  # as when ncl-cli fit and ncl-cli test are two processes
    media = "wandb/offline-run-*/files/media/images/val/z/top_activations_*.png"
    assert list(tmp_path.glob(media)), "TopActivations sent no picture to W&B"

    test = cli_main(["test", *common, "--ckpt_path", str(ckpts[0])])
    results = test.trainer.callback_metrics
    assert 0.0 <= float(results["test/online_acc"]) <= 1.0
    # after one epoch on 3,728 real images the online probe beats chance (10 %)
    assert float(results["test/online_acc"]) > 0.12
    assert float(results["test/z/sparsity"]) > 0.0  # NCL: exact zeros in the features


def test_unknown_nonneg_in_config_is_one_clear_error(tmp_path: Path) -> None:
    args = [
        "fit",
        "--config", str(ROOT / "configs" / "demo" / "digits_ncl.yaml"),
        "--model.init_args.nonneg", "leaky",
        "--trainer.default_root_dir", str(tmp_path),
    ]  # fmt: skip
    with pytest.raises(ValueError, match="unknown non-negative map 'leaky'; valid names"):
        cli_main(args)


FAST_PATH = [
    "--data.init_args.augment_on", "device",
    "--model.init_args.channels_last", "true",
    "--trainer.precision", "bf16-mixed",
]  # fmt: skip


@pytest.mark.ddp
@pytest.mark.parametrize("switches", [[], FAST_PATH], ids=["default", "device-aug-bf16-nhwc"])
def test_two_process_ddp_fit_through_the_cli(tmp_path: Path, switches: list[str]) -> None:
    """A real 2-rank gloo run of the demo NCL config: gathered negatives, kNN bank, metrics;
    also with the views made on the device, channels_last and bf16-mixed."""
    args = [
        "fit",
        "--config", str(ROOT / "configs" / "demo" / "digits_ncl.yaml"),
        "--trainer.strategy", "ddp_spawn",
        "--trainer.devices", "2",
        "--trainer.max_epochs", "1",
        "--trainer.limit_train_batches", "3",
        "--trainer.limit_val_batches", "2",
        "--trainer.check_val_every_n_epoch", "1",
        "--trainer.enable_progress_bar", "false",
        "--trainer.default_root_dir", str(tmp_path),
        "--trainer.logger.init_args.save_dir", str(tmp_path),
        "--data.init_args.batch_size", "32",
        *switches,
    ]  # fmt: skip
    cli = cli_main(args)
    assert cli.trainer.world_size == 2
    metrics = cli.trainer.callback_metrics
    assert {"train/objective", "val/knn_acc", "val/online_acc", "val/z/sparsity"} <= set(metrics)
    assert {"val/z/semantic_consistency", "val/h/effective_rank", "val/z/sepin@all"} <= set(metrics)
    assert list(tmp_path.rglob("last.ckpt"))
    assert len(list(tmp_path.rglob("pictures/val_z_*.png"))) == 4  # drawn once, by rank 0


@pytest.mark.slow
def test_cli_checkpoint_restores_from_the_file_alone(tmp_path: Path) -> None:
    """The checkpoint holds the config, not pickled modules: tensors-only load rebuilds NCL."""
    args = [
        "fit",
        "--config", str(ROOT / "configs" / "demo" / "digits_ncl.yaml"),
        "--trainer.max_epochs", "1",
        "--trainer.limit_train_batches", "2",
        "--trainer.enable_progress_bar", "false",
        "--trainer.default_root_dir", str(tmp_path),
        "--trainer.logger.init_args.save_dir", str(tmp_path),
    ]  # fmt: skip
    cli = cli_main(args)
    (path,) = tmp_path.rglob("last.ckpt")
    hparams = torch.load(path, weights_only=True, map_location="cpu")["hyper_parameters"]
    assert hparams["backbone"]["class_path"] == "ncl_lightning.nn.SmallCNN"
    restored = NCL.load_from_checkpoint(path).eval()
    x = next(iter(cli.datamodule.val_dataloader()))[0]
    torch.testing.assert_close(restored.encode(x).z, cli.model.eval().encode(x).z, rtol=0, atol=0)
