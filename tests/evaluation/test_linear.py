"""Offline linear probe and fine-tuning from a pretrained checkpoint."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import lightning as L
import pytest
import torch

from ncl_lightning.data import DigitsDataModule
from ncl_lightning.evaluation import FineTune, LinearProbe
from tests.checkpoints.test_checkpoint import FACTORIES

_PRETRAINED: dict[str, Path] = {}


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """NCL pre-trained for 3 epochs on digits (BatchNorm statistics settled); trained once per
    process for this module and tests/evaluation/test_knn.py (in a session folder)."""
    if "ncl" not in _PRETRAINED:  # test_knn.py imports the fixture: a second definition
        torch.manual_seed(0)
        path = tmp_path_factory.mktemp("pre") / "ncl.ckpt"
        trainer = L.Trainer(max_epochs=3, limit_train_batches=22, limit_val_batches=0,
                            accelerator="cpu", logger=False, enable_checkpointing=False,
                            enable_progress_bar=False, enable_model_summary=False,
                            default_root_dir=path.parent)  # fmt: skip
        trainer.fit(FACTORIES["ncl"](), DigitsDataModule(batch_size=64, num_workers=0))
        trainer.save_checkpoint(path)  # not validated: only the checkpoint is used
        _PRETRAINED["ncl"] = path
    return _PRETRAINED["ncl"]


def _train(
    module: L.LightningModule, root: Path, epochs: int = 2, batches: int | None = None
) -> L.Trainer:
    trainer = L.Trainer(max_epochs=epochs, limit_train_batches=batches,
                        limit_val_batches=None if batches is None else 1, accelerator="cpu",
                        check_val_every_n_epoch=epochs, num_sanity_val_steps=0,
                        logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, default_root_dir=root)  # fmt: skip
    data = DigitsDataModule(batch_size=64, num_workers=0, n_views=1, train_transform="crop_flip")
    trainer.fit(module, data)
    return trainer


def _snapshot(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in module.state_dict().items()}


def test_linear_probe_leaves_the_backbone_bit_identical(pretrained: Path, tmp_path: Path) -> None:
    sgd = partial(torch.optim.SGD, lr=2.0, momentum=0.9)
    torch.manual_seed(0)  # the head's initialisation and the batches: not the test order's
    probe = LinearProbe(str(pretrained), num_classes=10, batch_size=64, optimizer=sgd)
    before, head_before = _snapshot(probe.backbone), probe.classifier.weight.clone()
    trainer = _train(probe, tmp_path)
    print("measured: val acc", float(trainer.callback_metrics["val/offline_linear/acc_top1"]))
    after = probe.backbone.state_dict()
    # weights *and* BatchNorm running statistics (the backbone stays in eval mode)
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert not torch.equal(head_before, probe.classifier.weight)
    assert not probe.backbone.training and probe.classifier.training
    assert trainer.callback_metrics["val/offline_linear/acc_top1"] > 0.5  # chance: 0.1
    assert "val/offline_linear/acc_top5" in trainer.callback_metrics
    assert not any(p.requires_grad for p in probe.backbone.parameters())


def test_fine_tuning_trains_the_backbone(pretrained: Path, tmp_path: Path) -> None:
    tune = FineTune(str(pretrained), num_classes=10, batch_size=64)
    before = _snapshot(tune.backbone)
    trainer = _train(tune, tmp_path, epochs=1, batches=2)  # any step moves the backbone
    after = tune.backbone.state_dict()
    assert not all(torch.equal(before[k], after[k]) for k in before)
    assert "val/offline_finetune/acc_top1" in trainer.callback_metrics


def test_bad_arguments(pretrained: Path) -> None:
    with pytest.raises(ValueError, match="num_classes must be >= 1"):
        LinearProbe(str(pretrained), num_classes=0)
    with pytest.raises(ValueError, match="label_smoothing must be in"):
        LinearProbe(str(pretrained), num_classes=10, label_smoothing=1.5)
    with pytest.raises(FileNotFoundError, match="checkpoint not found"):
        LinearProbe("nowhere.ckpt", num_classes=10)


def test_probe_optimises_only_the_linear_layer(pretrained: Path) -> None:
    probe = LinearProbe(str(pretrained), num_classes=10, batch_size=64)
    groups = probe.param_groups()
    ids = {id(p) for g in groups for p in g["params"]}
    assert ids == {id(p) for p in probe.classifier.parameters()}
    bias_group = next(g for g in groups if any(p is probe.classifier.bias for p in g["params"]))
    assert bias_group["weight_decay"] == 0.0 and bias_group["lars_exclude"]
    assert probe.backbone.spec["class_path"] == "ncl_lightning.nn.SmallCNN"
