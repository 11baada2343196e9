"""Every config through the real ``ncl-cli`` entry point, and fit -> checkpoint -> test.

Every image pre-training config is parsed, built (model, DataModule, Trainer) and passes
``ncl-cli``'s checks before fit, which include a forward pass of the built model on the
data's shape; one config per distinct code path (method class, DataModule, backbone
family, loss, non-negative map, optimiser, augmentation pipeline, precision) also trains
a ``fast_dev_run`` step. Data is made by the tests in the real on-disk formats (CIFAR
python pickles, an ImageNet-style folder tree holding the 100 subset WNIDs) or is
scikit-learn's bundled digits; the end-to-end run uses the real CIFAR-10 images.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import wandb
import yaml
from torchvision.datasets import CIFAR10, CIFAR100

from ncl_lightning.data import load_imagenet100_classes
from ncl_lightning.methods import NCL
from ncl_lightning.runtime.cli import TypedTrainer, cli_main
from ncl_lightning.runtime.runs import RunLock
from tests.conftest import ROOT, subset_copy
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
NAMES = [c.relative_to(ROOT / "configs").with_suffix("").as_posix() for c in CONFIGS]

# The configs that train a step, with the precision they train in (None: the shipped one).
# Together they cover every code path of the shipped configs (checked by
# test_the_fitted_configs_cover_every_code_path); the others differ from one of them only
# in numbers (widths, learning rates, classes), which the build test checks.
# bf16-mixed autocast has no hardware support on these CPUs (ResNet-18 on CIFAR: ~2x the
# 32-true step; ImageNet-100 at 224 px: ~3x, the ViT more): the shipped bf16-mixed is kept
# for one config per method (CL, NCL, BayesNCL, SupConNCL; SupConCL is CL with SupConNCL's
# labelled positives), the rest train in 32-true.
FIT: dict[str, str | None] = {
    "cifar10_ncl": None,  # bf16-mixed, channels_last, device views: the flagship config
    "cifar10_bayesncl": None,  # bf16-mixed: the gate under autocast
    "cifar10_supcon_ncl": None,  # bf16-mixed: labelled positives
    "cifar10_cl_l1": None,  # bf16-mixed: CL, the L1-penalised InfoNCE loss class
    "cifar10_spectral_ncl": "32-true",  # the spectral loss, SGD
    "cifar10_spectral_cl_l1": "32-true",  # the spectral loss with the L1 penalty (SCL + reg)
    "cifar100_ncl": "32-true",  # CIFAR-100's DataModule
    "imagenet100_ncl": "32-true",  # ImageNet-100's DataModule, ResNet ImageNet stem, relu
    "imagenet100_ncl_vit": "32-true",  # timm ViT-S/16 at 224 px, AdamW
    "subset/cifar10_subset_supcon_cl": None,  # ImageFolder, SmallCNN, CPU views (32-true)
    "demo/digits_cl": None,  # the digits, CL without a non-negative map (32-true)
}


def _paths(config: Path) -> set[tuple[str, str]]:
    """The code paths a config selects: its classes and named choices."""
    spec = yaml.safe_load(config.read_text())
    model, data = spec["model"]["init_args"], spec["data"]["init_args"]
    loss = model.get("loss", "info_nce")
    return {
        ("method", spec["model"]["class_path"]),
        ("data", spec["data"]["class_path"]),
        ("backbone", model["backbone"]["class_path"]),
        ("backbone stem", str(model["backbone"].get("init_args", {}).get("stem"))),
        ("loss", loss if isinstance(loss, str) else loss["class_path"]),
        ("nonneg", str(model.get("nonneg"))),
        ("optimizer", model["optimizer"]["class_path"]),
        ("augment_on", str(data.get("augment_on", "cpu"))),
        ("channels_last", str(model.get("channels_last", False))),
    }


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


def _args(config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """``ncl-cli fit`` of ``config`` on the CPU, batches of 2, on the tests' data."""
    return [
        "fit",
        "--config", str(config),
        "--trainer.accelerator", "cpu",
        "--trainer.devices", "1",
        "--trainer.default_root_dir", str(tmp_path / "run"),
        "--trainer.enable_progress_bar", "false",
        "--data.init_args.batch_size", "2",
        *_data_root(config, tmp_path, monkeypatch),
    ]  # fmt: skip


def _lean_callbacks(config: Path, tmp_path: Path) -> Path:
    """An overlay of ``config``'s callbacks without SEPIN's view passes and TopActivations'
    pictures (a third of a step's time); the callbacks are those of every image config, run
    as shipped by test_config_fast_dev_run[cifar10_ncl], and again by the real-CIFAR test
    (TopActivations to W&B) and the DDP test (SEPIN)."""
    callbacks = yaml.safe_load(config.read_text())["trainer"]["callbacks"]
    callbacks = [c for c in callbacks if not c["class_path"].endswith(".TopActivations")]
    for callback in callbacks:
        if callback["class_path"].endswith(".FeatureStatistics"):
            callback["init_args"]["sepin"] = False
    overlay = tmp_path / "lean_callbacks.yaml"
    overlay.write_text(yaml.safe_dump({"trainer": {"callbacks": callbacks}}))
    return overlay


def test_the_fitted_configs_cover_every_code_path() -> None:
    assert set(FIT) <= set(NAMES), sorted(set(FIT) - set(NAMES))
    fitted = set().union(*(_paths(ROOT / "configs" / f"{name}.yaml") for name in FIT))
    untrained = {path for config in CONFIGS for path in _paths(config)} - fitted
    assert not untrained, f"no config of FIT trains {sorted(untrained)}: add one to FIT"


BUILT = [(c, n) for c, n in zip(CONFIGS, NAMES, strict=True) if n not in FIT]


@pytest.mark.slow
@pytest.mark.parametrize("config", [c for c, _ in BUILT], ids=[n for _, n in BUILT])
def test_config_builds_and_passes_the_checks(
    config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Parsed, built and checked as ``ncl-cli fit`` does (the checks run the model forward
    on the data's shape); only ``Trainer.fit`` itself is left out."""
    fits: list[dict[str, Any]] = []
    monkeypatch.setattr(TypedTrainer, "fit", lambda self, **kwargs: fits.append(kwargs))
    cli = cli_main(_args(config, tmp_path, monkeypatch))
    for callback in cli.trainer.callbacks:  # the fit that would release the run's lock
        if isinstance(callback, RunLock):
            callback.release()
    assert [(f["model"], f["datamodule"]) for f in fits] == [(cli.model, cli.datamodule)]
    spec = yaml.safe_load(config.read_text())
    assert type(cli.model).__name__ == spec["model"]["class_path"].rpartition(".")[2]
    assert type(cli.datamodule).__name__ == spec["data"]["class_path"].rpartition(".")[2]
    assert cli.model.hparams.num_classes == cli.datamodule.num_classes
    assert cli.model.hparams.batch_size == 2


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(FIT))
def test_config_fast_dev_run(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = ROOT / "configs" / f"{name}.yaml"
    precision = FIT[name] or yaml.safe_load(config.read_text())["trainer"].get("precision")
    args = [*_args(config, tmp_path, monkeypatch), "--trainer.fast_dev_run", "1"]
    if FIT[name]:
        args += ["--trainer.precision", FIT[name]]
    if name != "cifar10_ncl":  # the flagship runs every callback as shipped
        args += ["--config", str(_lean_callbacks(config, tmp_path))]
    cli = cli_main(args)
    assert cli.trainer.state.finished and cli.trainer.global_step == 1
    assert cli.trainer.precision == (precision or "32-true")
    assert cli.model.hparams.num_classes == cli.datamodule.num_classes
    assert cli.model.hparams.batch_size == 2
    metrics = cli.trainer.callback_metrics
    assert {"train/loss", "val/online_acc", "val/z/sparsity"} <= set(metrics)


@pytest.mark.slow
def test_fit_one_epoch_on_real_cifar_then_test(tmp_path: Path) -> None:
    """One epoch on real CIFAR-10 images with the W&B logger offline, then ncl-cli test:
    150 training images of each class of the real subset and all its 932 validation ones."""
    cifar = subset_copy(tmp_path / "cifar", train=150, val=93)
    config = ROOT / "configs" / "cifar10_ncl.yaml"
    # the config's callbacks without SEPIN, which re-encodes views of every validation and
    # test image (a third of this test's time); test_config_fast_dev_run[cifar10_ncl] and
    # the DDP test run it
    callbacks = yaml.safe_load(config.read_text())["trainer"]["callbacks"]
    for callback in callbacks:
        if callback["class_path"].endswith(".FeatureStatistics"):
            callback["init_args"]["sepin"] = False
    overlay = tmp_path / "no_sepin.yaml"
    overlay.write_text(yaml.safe_dump({"trainer": {"callbacks": callbacks}}))
    common = [
        "--config", str(config),
        "--config", str(overlay),
        "--data", "ncl_lightning.data.ImageFolderDataModule",
        "--data.root", str(cifar),
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
    run = ckpts[0].parent.parent  # W&B's files too: <run folder>/wandb/
    assert list(run.glob("wandb/offline-run-*")), "the W&B logger wrote no offline run"
    wandb.finish()  # as when ncl-cli fit and ncl-cli test are two processes
    media = "wandb/offline-run-*/files/media/images/val/z/top_activations_*.png"
    assert list(run.glob(media)), "TopActivations sent no picture to W&B"

    test = cli_main(["test", *common, "--ckpt_path", str(ckpts[0])])
    results = test.trainer.callback_metrics
    assert 0.0 <= float(results["test/online_acc"]) <= 1.0
    # after one epoch on 1,500 real images the online probe beats chance (10 %) on the 932
    # validation images (measured 0.16; a chance-level probe passes 0.12 with p ~ 2 %)
    assert float(results["test/online_acc"]) > 0.12
    assert float(results["test/z/sparsity"]) > 0.0  # NCL: exact zeros in the features
    assert "test/z/sepin@all" not in results and "test/z/semantic_consistency" in results


def test_unknown_nonneg_in_config_is_one_clear_error(tmp_path: Path) -> None:
    args = [
        "fit",
        "--config", str(ROOT / "configs" / "demo" / "digits_ncl.yaml"),
        "--model.init_args.nonneg", "leaky",
        "--trainer.default_root_dir", str(tmp_path),
    ]  # fmt: skip
    with pytest.raises(ValueError, match="unknown non-negative map 'leaky'; valid names"):
        cli_main(args)


@pytest.mark.ddp
def test_two_process_ddp_fit_through_the_cli(tmp_path: Path) -> None:
    """A real 2-rank gloo run of the demo NCL config: gathered negatives, kNN bank, metrics;
    with the fast path's switches (views made on the device, as the config ships,
    channels_last and bf16-mixed), whose every part is also the plain config's path (the
    objective and what is gathered run in float32 either way)."""
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
        "--data.init_args.augment_on", "device",
        "--model.init_args.channels_last", "true",
        "--trainer.precision", "bf16-mixed",
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
