"""Linear probe and fine-tuning on the projector output ``z`` (NCL paper, Table 7).

The references are written out here: ``z`` by hand from the loaded method's modules
(projector, ReLU, BayesNCL's hard gate at inference), the frozen parts compared weight
by weight and buffer by buffer before and after training, the metric keys by name.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import lightning as L
import pytest
import torch

from ncl_lightning import load_backbone, load_method
from ncl_lightning.data import DigitsDataModule
from ncl_lightning.evaluation import FineTune, LinearProbe
from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.methods import CL, NCL, BayesNCL, NCEClassifier
from ncl_lightning.nn import SmallCNN
from ncl_lightning.runtime.cli import cli_main
from tests.checkpoints.test_checkpoint import _fit_and_save
from tests.conftest import ROOT

CPU = ["--trainer.accelerator", "cpu", "--trainer.devices", "1", "--trainer.strategy", "auto"]
QUIET = ["--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"]
HEADS = {"proj_hidden_dim": 32, "proj_output_dim": 16, "num_classes": 10, "batch_size": 64}
FACTORIES = {
    "cl": lambda: CL(SmallCNN(1, 8, 24), **HEADS),
    # BatchNorm in the projector too: its statistics must not move under the probe
    "ncl": lambda: NCL(SmallCNN(1, 8, 24), proj_batch_norm=True, **HEADS),
    "bayesncl": lambda: BayesNCL(SmallCNN(1, 8, 24), **HEADS),
}


# Pre-training (epochs, batches) on the digits, BatchNorm statistics settled for the z
# probes below to reach above chance (measured on 1 thread: NCL 0.60 after 2 x 16 steps,
# BayesNCL 0.52 after 3 x 22, 0.42 after 2 x 16; the bar is 0.25). CL's checkpoint is only
# read back exactly: a few steps do.
BUDGETS = {"cl": (1, 4), "ncl": (2, 16), "bayesncl": (3, 22)}


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """CL, NCL and BayesNCL pre-trained on the digits for their ``BUDGETS``."""
    root = tmp_path_factory.mktemp("pre_z")
    paths = {}
    for name, factory in FACTORIES.items():
        torch.manual_seed(0)
        epochs, batches = BUDGETS[name]
        paths[name] = _pretrain(factory(), root / f"{name}.ckpt", epochs, batches)
    return paths


def _pretrain(model: L.LightningModule, path: Path, epochs: int, batches: int) -> Path:
    """Fit on the digits (two views) without validating (not needed for a checkpoint), save."""
    trainer = L.Trainer(max_epochs=epochs, limit_train_batches=batches, limit_val_batches=0,
                        accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        default_root_dir=path.parent)  # fmt: skip
    trainer.fit(model, DigitsDataModule(batch_size=64, num_workers=0, n_views=2))
    trainer.save_checkpoint(path)
    return path


def _reference_z(method: L.LightningModule, x: torch.Tensor) -> torch.Tensor:
    """``z`` written out from the modules: ``g(f(x))``, ReLU for NCL and BayesNCL, times
    the hard gate ``1[σ(gating_head(h) / T) > threshold]`` for BayesNCL."""
    with torch.no_grad():
        h = method.backbone(x)
        z = method.projector(h)
        if isinstance(method, NCL):
            z = torch.relu(z)
        if isinstance(method, BayesNCL):
            hp = method.hparams
            alpha = torch.sigmoid(method.gating_head(h) / hp.gate_temperature)
            z = z * (alpha > hp.threshold).float()
    return z


def _train(
    module: L.LightningModule, root: Path, epochs: int = 2, batches: int | None = None
) -> L.Trainer:
    trainer = L.Trainer(max_epochs=epochs, limit_train_batches=batches, limit_val_batches=2,
                        check_val_every_n_epoch=epochs, num_sanity_val_steps=0,
                        accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        default_root_dir=root)  # fmt: skip
    data = DigitsDataModule(batch_size=64, num_workers=0, n_views=1, train_transform="crop_flip")
    trainer.fit(module, data)
    return trainer


def _snapshot(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in module.state_dict().items()}


@pytest.mark.parametrize("name", list(FACTORIES))
def test_z_probe_reads_the_methods_z(name: str, pretrained: dict[str, Path]) -> None:
    path = pretrained[name]
    probe = LinearProbe(str(path), num_classes=10, batch_size=64, space="z")
    reference = load_method(path)  # an independent copy, in eval mode
    x = torch.rand(7, 1, 8, 8)
    out = probe.encode(x)
    expected = _reference_z(reference, x)
    assert out.z.shape == (7, 16) and probe.classifier.in_features == 16
    torch.testing.assert_close(out.z, expected, rtol=0, atol=0)
    torch.testing.assert_close(out.h, reference.backbone(x).detach(), rtol=0, atol=0)
    torch.testing.assert_close(probe(x), probe.classifier(expected))
    if name != "cl":
        assert (out.z >= 0).all() and (out.z == 0).any()
    # space h keeps reading h
    h_probe = LinearProbe(str(path), num_classes=10, batch_size=64)
    assert h_probe.classifier.in_features == 24
    torch.testing.assert_close(h_probe.encode(x).z, h_probe.encode(x).h)


@pytest.mark.parametrize("name", ["ncl", "bayesncl"])
def test_z_probe_freezes_the_whole_method(
    name: str, pretrained: dict[str, Path], tmp_path: Path
) -> None:
    sgd = partial(torch.optim.SGD, lr=2.0, momentum=0.9)
    torch.manual_seed(0)  # the head's initialisation and the batches: not the test order's
    probe = LinearProbe(
        str(pretrained[name]), num_classes=10, batch_size=64, optimizer=sgd, space="z"
    )
    before, head_before = _snapshot(probe.method), probe.classifier.weight.clone()
    assert any("running_mean" in k for k in before if k.startswith("projector.")) == (name == "ncl")
    trainer = _train(probe, tmp_path)
    after = probe.method.state_dict()
    # weights *and* BatchNorm running statistics of backbone and projector
    assert before.keys() == after.keys()
    assert all(torch.equal(before[k], after[k]) for k in before), [
        k for k in before if not torch.equal(before[k], after[k])
    ]
    assert not torch.equal(head_before, probe.classifier.weight)
    assert not probe.method.training and probe.classifier.training
    assert not any(p.requires_grad for p in probe.method.parameters())
    ids = {id(p) for g in probe.param_groups() for p in g["params"]}
    assert ids == {id(p) for p in probe.classifier.parameters()}
    metrics = trainer.callback_metrics
    print(f"measured: {name} z probe val acc {float(metrics['val/offline_linear_z/acc_top1']):.4f}")
    assert {"train/offline_linear_z/loss", "val/offline_linear_z/acc_top1"} <= set(metrics)
    assert "val/offline_linear_z/acc_top5" in metrics
    assert not any("offline_linear/" in k for k in metrics)  # no collision with h's keys
    assert metrics["val/offline_linear_z/acc_top1"] > 0.25  # chance: 0.1


@pytest.mark.parametrize("name", ["ncl", "bayesncl"])
def test_z_finetune_trains_encoder_and_projector(
    name: str, pretrained: dict[str, Path], tmp_path: Path
) -> None:
    tune = FineTune(str(pretrained[name]), num_classes=10, batch_size=64, space="z")
    method = tune.method
    trained = ["backbone", "projector"] + (["gating_head"] if name == "bayesncl" else [])
    before = {part: _snapshot(getattr(method, part)) for part in [*trained, "online"]}
    ids = {id(p) for g in tune.param_groups() for p in g["params"]}
    expected = {id(p) for part in trained for p in getattr(method, part).parameters()}
    assert ids == expected | {id(p) for p in tune.classifier.parameters()}
    trainer = _train(tune, tmp_path, epochs=1, batches=5)
    for part in trained:
        after = getattr(method, part).state_dict()
        changed = [k for k in after if not torch.equal(before[part][k], after[k])]
        assert changed, f"{part} did not change"
        assert any(k.endswith("weight") for k in changed), part
    # trained in train mode: the backbone's BatchNorm statistics moved
    assert any(k.endswith("running_mean") for k in before["backbone"])
    bn_after = method.backbone.state_dict()
    assert all(
        not torch.equal(before["backbone"][k], bn_after[k])
        for k in bn_after
        if k.endswith("running_mean")
    )
    online = method.online.state_dict()  # the pre-training probe is not on the way to z
    assert all(torch.equal(before["online"][k], online[k]) for k in online)
    metrics = trainer.callback_metrics
    assert {"train/offline_finetune_z/loss", "val/offline_finetune_z/acc_top1"} <= set(metrics)
    assert not any("offline_finetune/" in k for k in metrics)
    assert tune.backbone is method.backbone


def test_z_probe_checkpoint_keeps_the_backbone_record(
    pretrained: dict[str, Path], tmp_path: Path
) -> None:
    probe = LinearProbe(str(pretrained["ncl"]), num_classes=10, batch_size=64, space="z")
    path = _fit_and_save(probe, tmp_path / "probe_z.ckpt", n_views=1)
    encoder = load_backbone(path)  # the probe's `backbone.*` keys
    ours, theirs = encoder.state_dict(), probe.backbone.state_dict()
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)
    record = torch.load(path, weights_only=True)["ncl_lightning"]
    assert record["backbone"]["class_path"] == "ncl_lightning.nn.SmallCNN"


def test_bad_space_and_checkpoints_without_z(pretrained: dict[str, Path], tmp_path: Path) -> None:
    # checked before the checkpoint is read: the file does not exist
    with pytest.raises(ConfigError, match=r"^space must be one of 'h', 'z', 'p', got 'q'$") as err:
        LinearProbe("nowhere.ckpt", num_classes=10, space="q")  # type: ignore[arg-type]
    assert err.value.key == "space"
    torch.manual_seed(0)
    nce = NCEClassifier(SmallCNN(1, 8, 24), num_classes=10, batch_size=64)  # no projector
    nce_path = _fit_and_save(nce, tmp_path / "nce.ckpt", n_views=1)
    for protocol in (LinearProbe, FineTune):
        with pytest.raises(ConfigError, match=r"space: z needs a projector output.*NCEClassifier"):
            protocol(str(nce_path), num_classes=10, space="z")
    h_probe = LinearProbe(str(pretrained["cl"]), num_classes=10, batch_size=64)
    h_path = _fit_and_save(h_probe, tmp_path / "probe_h.ckpt", n_views=1)
    with pytest.raises(ConfigError, match=r"LinearProbe without a projector; use space: h") as err:
        LinearProbe(str(h_path), num_classes=10, space="z")
    assert err.value.key == "space" and "\n" not in str(err.value)


def test_nce_with_a_projector_probes_its_representation(tmp_path: Path) -> None:
    """NCE's z is the representation its classifier reads: ReLU of the projector output."""
    torch.manual_seed(0)
    nce = NCEClassifier(
        SmallCNN(1, 8, 24), num_classes=10, batch_size=64, proj_hidden_dim=32, proj_output_dim=16
    )
    path = _fit_and_save(nce, tmp_path / "nce.ckpt", n_views=1)
    probe = LinearProbe(str(path), num_classes=10, batch_size=64, space="z")
    reference = load_method(path)
    x = torch.rand(5, 1, 8, 8)
    with torch.no_grad():
        expected = torch.relu(reference.projector(reference.backbone(x)))
    torch.testing.assert_close(probe.encode(x).z, expected, rtol=0, atol=0)


@pytest.fixture(scope="module")
def digits_ncl_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real (2-step) ``ncl-cli fit`` of configs/demo/digits_ncl.yaml."""
    root = tmp_path_factory.mktemp("pretrain_digits_z")
    cli_main([
        "fit",
        "--config", str(ROOT / "configs" / "demo" / "digits_ncl.yaml"),
        "--trainer.max_epochs", "1",
        "--trainer.limit_train_batches", "2",
        "--trainer.limit_val_batches", "0",  # last.ckpt at the end of the training epoch
        "--trainer.logger", "false",  # ModelCheckpoint writes <root>/<run id>/checkpoints
        "--trainer.default_root_dir", str(root),
        "--run_id", "pretrain",
        "--data.init_args.num_workers", "0",
        *CPU, *QUIET,
    ])  # fmt: skip
    path = root / "pretrain" / "checkpoints" / "last.ckpt"
    assert path.is_file(), f"pre-training wrote no {path}"
    return path


@pytest.mark.slow
@pytest.mark.parametrize("config", ["digits_linear", "digits_finetune"])
def test_ncl_cli_fits_on_z_from_a_real_ncl_checkpoint(
    config: str, digits_ncl_ckpt: Path, tmp_path: Path
) -> None:
    ckpt = digits_ncl_ckpt
    args = [
        "fit",
        "--config", str(ROOT / "configs" / "eval" / f"{config}.yaml"),
        "--model.checkpoint", str(ckpt),
        "--model.init_args.space", "z",
        "--trainer.max_epochs", "1",
        "--trainer.limit_train_batches", "3",
        "--trainer.limit_val_batches", "2",
        "--trainer.check_val_every_n_epoch", "1",
        "--trainer.num_sanity_val_steps", "0",
        "--trainer.default_root_dir", str(tmp_path / "run"),
        "--trainer.logger", "false",
        *CPU, *QUIET,
    ]  # fmt: skip
    cli = cli_main(args)
    assert cli.trainer.state.finished and cli.model.hparams.space == "z"
    assert cli.model.classifier.in_features == 64  # the demo's proj_output_dim
    label = "offline_linear_z" if config == "digits_linear" else "offline_finetune_z"
    metrics = cli.trainer.callback_metrics
    assert {f"train/{label}/loss", f"val/{label}/acc_top1", f"val/{label}/acc_top5"} <= set(metrics)
    assert 0.0 <= float(metrics[f"val/{label}/acc_top1"]) <= 1.0
    x = torch.rand(4, 1, 8, 8)
    method = load_method(ckpt)
    cli.model.eval()
    if config == "digits_linear":  # the probe's method is the checkpoint's, untouched
        torch.testing.assert_close(cli.model.encode(x).z, _reference_z(method, x))
