"""Every evaluation and supervised (CE/NCE) config through the real ``ncl-cli`` entry point.

Evaluation configs need a pretrained checkpoint: module fixtures make two with real,
tiny pre-training fits through ``cli_main`` (NCL on the digits, 1 channel; NCL with a
3-channel SmallCNN on a small RGB folder, which also serves the CIFAR and ImageNet-100
configs since the CNN pools globally). Each config then runs as its header says, on data
the tests make in the real on-disk formats (``tests.test_cli._data_root``), with
``--model.checkpoint`` on the command line; fits use ``fast_dev_run`` (one step), tests a couple of
batches. The OOD config runs the documented two-step path: a linear probe fit, then
``ncl-cli test --model.checkpoint <pretrained> --ckpt_path <probe>`` on small Stylized /
Sketch / ImageNet-C trees.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
import yaml

from ncl_lightning.data import load_imagenet100_classes
from ncl_lightning.runtime.cli import cli_main
from tests.conftest import ROOT
from tests.data.test_ood import CORRUPTIONS, make_ood_tree
from tests.fakes import make_image_folder
from tests.runtime.test_cli import _data_root

EVAL = ROOT / "configs" / "eval"
EVAL_CONFIGS = sorted(c for c in EVAL.glob("*.yaml") if not c.stem.endswith("_ood"))
SUPERVISED = sorted(
    c
    for c in (ROOT / "configs").rglob("*.yaml")
    # .get: overlays (configs/ground_truth/overlays) only set init_args
    if (model := yaml.safe_load(c.read_text()).get("model") or {}).get("class_path")
    == "ncl_lightning.methods.NCEClassifier"
    # the fine-tune configs need a CL checkpoint: tests/methods/test_nce_table4.py
    and not model.get("init_args", {}).get("require_pretrained")
)
CPU = ["--trainer.accelerator", "cpu", "--trainer.devices", "1", "--trainer.strategy", "auto"]
QUIET = ["--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"]


def _pretrain(config: str, root: Path, *extra: str) -> Path:
    """A real 2-step NCL pre-training fit; returns its ``last.ckpt``."""
    args = [
        "fit",
        "--config", str(ROOT / "configs" / config),
        "--trainer.max_epochs", "1",
        "--trainer.limit_train_batches", "2",
        "--trainer.limit_val_batches", "1",
        "--trainer.logger", "false",  # ModelCheckpoint then writes <root>/<run id>/checkpoints
        "--trainer.default_root_dir", str(root),
        "--run_id", "pretrain",
        "--data.init_args.num_workers", "0",
        *CPU, *QUIET, *extra,
    ]  # fmt: skip
    cli_main(args)
    path = root / "pretrain" / "checkpoints" / "last.ckpt"
    assert path.is_file(), f"pre-training wrote no {path}"
    return path


@pytest.fixture(scope="module")
def digits_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """NCL on the digits (SmallCNN, 1 channel)."""
    return _pretrain("demo/digits_ncl.yaml", tmp_path_factory.mktemp("pretrain_digits"))


@pytest.fixture(scope="module")
def rgb_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """NCL with a narrow 3-channel SmallCNN on a small RGB folder (32 px)."""
    tmp = tmp_path_factory.mktemp("pretrain_rgb")
    folder = make_image_folder(tmp / "data", [f"c{i}" for i in range(4)], n=2, size=(32, 32))
    return _pretrain(
        "subset/cifar10_subset_ncl.yaml", tmp / "run",
        "--data.init_args.root", str(folder),
        "--data.init_args.batch_size", "4",
        "--model.init_args.backbone.width", "8",  # fast at 224 px for the ImageNet configs
    )  # fmt: skip


def _checkpoint_for(config: Path, request: pytest.FixtureRequest) -> str:
    data = yaml.safe_load(config.read_text())["data"]["class_path"]
    name = "digits_ckpt" if data.endswith("DigitsDataModule") else "rgb_ckpt"
    return str(request.getfixturevalue(name))


def _small_data(config: Path, tmp: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """``_data_root``'s data, batches of 4, and 4 of its ImageNet-100 classes (the kNN bank
    and feature selection encode the whole training split at 224 px).

    The digits are the real 1,437 training images, which the kNN bank and feature selection
    encode in full: batches of 64 there, not 360 batches of 4."""
    data_class = yaml.safe_load(config.read_text())["data"]["class_path"]
    args = [*_data_root(config, tmp, monkeypatch), "--data.init_args.num_workers", "0"]
    digits = data_class.endswith("DigitsDataModule")
    args += ["--data.init_args.batch_size", "64" if digits else "4"]
    if data_class.endswith("ImageNet100DataModule"):
        class_list = tmp / "classes.txt"
        class_list.write_text("\n".join(load_imagenet100_classes()[:4]) + "\n")
        args += ["--data.init_args.class_list", str(class_list)]
    return args


def _eval_args(config: Path, ckpt: str, tmp: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    return [
        "--config", str(config),
        "--model.checkpoint", ckpt,
        "--trainer.default_root_dir", str(tmp / "run"),
        *_small_data(config, tmp, monkeypatch),
        *CPU, *QUIET,
    ]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("config", SUPERVISED, ids=[c.stem for c in SUPERVISED])
def test_supervised_config_fast_dev_run(
    config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = [
        "fit",
        "--config", str(config),
        "--trainer.fast_dev_run", "1",
        "--trainer.default_root_dir", str(tmp_path / "run"),
        *_small_data(config, tmp_path, monkeypatch),
        *CPU, *QUIET,
    ]  # fmt: skip
    if config.parent.name == "nce":
        # the paper's 16384 -> 2048 projector makes FeatureStatistics' effective rank an
        # eigendecomposition of a 2048 x 2048 Gram matrix: ~5 s on 2 CPU cores
        args += ["--model.init_args.proj_hidden_dim", "1024"]
        args += ["--model.init_args.proj_output_dim", "256"]
    if config.stem != "cifar10_nce":
        # bf16-mixed autocast has no hardware support on these CPUs (~2x the step, ~2.5x at
        # 224 px): cifar10_nce keeps the shipped bf16-mixed for the classifier's path (the
        # CE configs differ from the NCE ones only in the loss and the non-negative maps)
        args += ["--trainer.precision", "32-true"]
    cli = cli_main(args)
    assert cli.trainer.state.finished
    assert cli.model.hparams.num_classes == cli.datamodule.num_classes
    assert cli.model.hparams.batch_size == cli.datamodule.batch_size
    metrics = cli.trainer.callback_metrics
    assert {"train/classifier/loss", "val/classifier/acc_top1", "val/z/sparsity"} <= set(metrics)
    if cli.model.hparams.loss == "nce":  # non-negative features and classifier weights
        assert float(metrics["val/z/sparsity"]) > 0.0


@pytest.mark.slow
@pytest.mark.parametrize("config", EVAL_CONFIGS, ids=[c.stem for c in EVAL_CONFIGS])
def test_eval_config(
    config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    spec = yaml.safe_load(config.read_text())
    protocol = spec["model"]["class_path"].rsplit(".", 1)[-1]
    args = _eval_args(config, _checkpoint_for(config, request), tmp_path, monkeypatch)
    if protocol in ("LinearProbe", "FineTune"):  # ncl-cli fit
        cli = cli_main(["fit", *args, "--trainer.fast_dev_run", "1"])
        label = "offline_linear" if protocol == "LinearProbe" else "offline_finetune"
        expected = {f"train/{label}/loss", f"val/{label}/acc_top1", f"val/{label}/acc_top5"}
    else:  # ncl-cli test
        extra = ["--trainer.limit_test_batches", "2", "--trainer.logger", "false"]
        if protocol == "FeatureSelection":
            extra += ["--model.init_args.ks", "[4, 8]", "--model.init_args.probe_epochs", "2"]
        shipped_transfer = (spec["model"].get("init_args") or {}).get("transfer")
        transfer = protocol == "FeatureSelection" and (
            "subset" in config.stem or shipped_transfer is not None
        )
        if shipped_transfer is not None:  # Table 1's Stylized ImageNet-100: the same tree
            extra += [
                f"--model.init_args.transfer.init_args.{key}={value}"
                for key, value in (
                    ("root", tmp_path / "imagenet"),
                    ("class_list", tmp_path / "classes.txt"),
                    ("batch_size", 4),
                    ("num_workers", 0),
                )
            ]
        elif transfer:  # the commented-out `transfer:` example of the config, on 3 classes
            folder = make_image_folder(tmp_path / "transfer", ["x", "y", "z"], n=2, size=(40, 40))
            extra += [
                "--model.init_args.transfer", "ncl_lightning.data.ImageFolderDataModule",
                "--model.init_args.transfer.root", str(folder),
                "--model.init_args.transfer.image_size", "32",
                "--model.init_args.transfer.batch_size", "4",
                "--model.init_args.transfer.num_workers", "0",
            ]  # fmt: skip
        cli = cli_main(["test", *args, *extra])
        if protocol == "KNNClassifier":
            expected = {"test/offline_knn/acc_top1", "test/offline_knn/acc_top5"}
        else:
            rules = spec["model"]["init_args"].get("rules") or ["ea", "random"]
            expected = {f"test/selection/{r}/k{k}/linear_acc" for r in rules for k in (4, 8)}
            expected.add(f"test/selection/{rules[0]}/k4/retrieval_p@10")
            if transfer:
                expected.add("test/selection/random/k8/transfer_acc")
            assert (tmp_path / "run" / "feature_selection.md").is_file()
    assert cli.trainer.state.finished
    assert cli.model.hparams.num_classes == cli.datamodule.num_classes
    metrics = cli.trainer.callback_metrics
    assert expected <= set(metrics), sorted(metrics)
    assert all(0.0 <= float(metrics[k]) <= 1.0 for k in expected if "/loss" not in k)


@pytest.mark.slow
def test_imagenet100_ood_config(rgb_ckpt: Path, tmp_path: Path) -> None:
    """imagenet100_linear fit (1 step) -> imagenet100_ood test of that probe, as documented."""
    classes = load_imagenet100_classes()
    wnids = [classes[42], classes[0], classes[7]]
    class_list = tmp_path / "classes.txt"
    class_list.write_text("\n".join(wnids) + "\n")
    imagenet = make_image_folder(tmp_path / "imagenet", wnids, n=2)
    pretrained = tmp_path / "first_place.ckpt"
    shutil.copy(rgb_ckpt, pretrained)
    probe_args = [
        "fit",
        "--config", str(EVAL / "imagenet100_linear.yaml"),
        "--model.checkpoint", str(pretrained),
        "--data.init_args.root", str(imagenet),
        "--data.init_args.class_list", str(class_list),
        "--data.init_args.batch_size", "4",
        "--data.init_args.num_workers", "0",
        "--trainer.max_epochs", "1",
        "--trainer.limit_train_batches", "1",
        "--trainer.limit_val_batches", "1",
        # a CSV logger in place of W&B (LearningRateMonitor needs a logger)
        "--trainer.logger", "lightning.pytorch.loggers.CSVLogger",
        "--trainer.logger.save_dir", str(tmp_path / "probe"),
        "--trainer.default_root_dir", str(tmp_path / "probe"),
        *CPU, *QUIET,
    ]  # fmt: skip
    cli_main(probe_args)
    (probe,) = (tmp_path / "probe").rglob("last.ckpt")

    roots = make_ood_tree(tmp_path / "ood", wnids)
    # the pretrained file moved since the probe was trained: the path given now wins over
    # the one recorded in the probe's hyper-parameters
    moved = pretrained.rename(tmp_path / "moved.ckpt")
    test_args = [
        "test",
        "--config", str(EVAL / "imagenet100_ood.yaml"),
        "--model.checkpoint", str(moved),
        "--ckpt_path", str(probe),
        *(a for key, root in roots.items() for a in (f"--data.init_args.{key}", root)),
        "--data.init_args.class_list", str(class_list),
        "--data.init_args.corruptions", str(CORRUPTIONS),
        "--data.init_args.severities", "[1, 3]",
        "--data.init_args.batch_size", "4",
        "--data.init_args.num_workers", "0",
        "--trainer.logger", "false",
        "--trainer.default_root_dir", str(tmp_path / "ood_run"),
        *CPU, *QUIET,
    ]  # fmt: skip
    cli = cli_main(test_args)
    names = cli.datamodule.test_names
    assert len(names) == 2 + 2 * len(CORRUPTIONS)
    metrics = cli.trainer.callback_metrics
    keys = {f"test/{name}/offline_linear/acc_top1" for name in names}
    assert keys <= set(metrics), sorted(metrics)
    # the tested classifier is the trained probe of --ckpt_path, not a fresh linear layer
    state = torch.load(probe, weights_only=True, map_location="cpu")["state_dict"]
    torch.testing.assert_close(cli.model.classifier.state_dict(), {
        k.removeprefix("classifier."): v for k, v in state.items() if k.startswith("classifier.")
    })  # fmt: skip
    report = (tmp_path / "ood_run" / "ood_results.md").read_text()
    assert "offline_linear/acc_top1" in report and "imagenet_c (mean)" in report
    assert (tmp_path / "ood_run" / "ood_results.json").is_file()
