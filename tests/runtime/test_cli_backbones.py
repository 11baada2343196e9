"""Backbones by name and a user's own module, end to end through the real ``ncl-cli``:
fit a few steps on the digits, ``ncl-cli test`` the checkpoint, build its atlas, and read
the backbone back with ``load_backbone`` / ``load_method`` (never downloading weights)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch
import yaml

from ncl_lightning import load_backbone, load_method
from ncl_lightning.atlas import build_atlas, read_atlas
from ncl_lightning.checkpoints.check import TRUSTED_ENV
from ncl_lightning.checkpoints.load import RECORD_KEY, CheckpointError
from ncl_lightning.methods import NCL
from ncl_lightning.nn import TimmBackbone, TorchvisionBackbone
from ncl_lightning.runtime.cli import cli_main
from tests.conftest import ROOT

CONFIG = ROOT / "configs" / "demo" / "digits_ncl.yaml"
BB = "--model.init_args.backbone"
# A 2-block ViT-Tiny on the 8x8 digits: 1 channel, 2x2 patches (16 tokens).
TIMM_VIT = [
    BB, "ncl_lightning.nn.TimmBackbone", f"{BB}.name", "vit_tiny_patch16_224",
    f"{BB}.in_chans", "1", f"{BB}.img_size", "8", f"{BB}.patch_size", "2",
    f"{BB}.model_kwargs", "{depth: 2}",
]  # fmt: skip
# torchvision's ResNet-18 with the CIFAR stem (8x8 -> 1x1 after layer4), 1 channel.
TV_RESNET = [
    BB, "ncl_lightning.nn.TorchvisionBackbone", f"{BB}.name", "resnet18",
    f"{BB}.cifar_stem", "true", f"{BB}.in_channels", "1",
]  # fmt: skip
USER_MODULE = """
    import torch
    from torch import nn


    class MyNet(nn.Module):
        def __init__(self, width: int = 16) -> None:
            super().__init__()
            self.out_dim = width
            self.conv = nn.Conv2d(1, width, 3, padding=1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.conv(x).relu().mean(dim=(2, 3))
"""


def _common(tmp_path: Path, backbone: list[str]) -> list[str]:
    return [
        "--config", str(CONFIG),
        *backbone,
        "--trainer.accelerator", "cpu",
        "--trainer.devices", "1",
        "--trainer.precision", "32-true",
        "--trainer.default_root_dir", str(tmp_path),
        "--trainer.logger.init_args.save_dir", str(tmp_path),
        "--trainer.enable_progress_bar", "false",
        "--data.init_args.batch_size", "32",
        "--data.init_args.num_workers", "0",
    ]  # fmt: skip


def _fit_and_test(tmp_path: Path, backbone: list[str]) -> tuple[Path, torch.nn.Module]:
    """fit 3 steps -> ``last.ckpt`` -> ncl-cli test; (checkpoint, trained backbone)."""
    common = _common(tmp_path, backbone)
    fit = cli_main(["fit", *common, "--trainer.max_epochs", "1",
                    "--trainer.limit_train_batches", "3", "--trainer.limit_val_batches", "1",
                    "--trainer.check_val_every_n_epoch", "1"])  # fmt: skip
    assert fit.trainer.global_step == 3
    (ckpt,) = tmp_path.rglob("last.ckpt")
    test = cli_main(
        ["test", *common, "--ckpt_path", str(ckpt), "--trainer.limit_test_batches", "2"]
    )
    assert 0.0 <= float(test.trainer.callback_metrics["test/online_acc"]) <= 1.0
    return ckpt, fit.model.backbone


def _atlas(ckpt: Path, out: Path) -> None:
    """The atlas page of ``ckpt`` on the digits' test split: every sample, every unit."""
    (model,) = read_atlas(build_atlas([ckpt], out, config=CONFIG))["models"]
    assert model["num_samples"] == 360 and len(model["dims"]["freq"]) == 64  # proj_output_dim


def _same_weights(a: torch.nn.Module, b: torch.nn.Module) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)


def _never_download(monkeypatch: pytest.MonkeyPatch) -> None:
    """timm / torchvision refuse to build anything with pretrained weights."""
    import timm
    import torchvision

    create, get_model = timm.create_model, torchvision.models.get_model

    def create_offline(name, pretrained=False, **kwargs):
        assert not pretrained, "a checkpoint asked timm for pretrained weights"
        return create(name, pretrained=False, **kwargs)

    def get_model_offline(name, weights=None, **kwargs):
        assert weights is None, "a checkpoint asked torchvision for weights"
        return get_model(name, weights=None, **kwargs)

    monkeypatch.setattr(timm, "create_model", create_offline)
    monkeypatch.setattr(torchvision.models, "get_model", get_model_offline)


def _as_if_pretrained(ckpt: Path, out: Path, key: str, value: object) -> Path:
    """A copy of ``ckpt`` whose config and record ask for pretrained weights."""
    data = torch.load(ckpt, weights_only=True, map_location="cpu")
    data[RECORD_KEY]["backbone"]["init_args"][key] = value
    data["hyper_parameters"]["backbone"]["init_args"][key] = value
    torch.save(data, out)
    return out


@pytest.mark.slow
@pytest.mark.parametrize(
    ("backbone", "cls", "key", "value"),
    [(TIMM_VIT, TimmBackbone, "pretrained", True),
     (TV_RESNET, TorchvisionBackbone, "weights", "DEFAULT")],
    ids=["timm-vit", "torchvision-resnet18"],
)  # fmt: skip
def test_a_backbone_by_name_fits_tests_and_makes_an_atlas(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backbone, cls, key, value
) -> None:
    ckpt, trained = _fit_and_test(tmp_path, backbone)
    _atlas(ckpt, tmp_path / "atlas")
    _never_download(monkeypatch)
    loaded = load_backbone(ckpt)
    assert isinstance(loaded, cls) and loaded.out_dim == trained.out_dim
    _same_weights(loaded, trained)
    x = torch.rand(3, 1, 8, 8)
    assert torch.equal(loaded.eval()(x), trained.eval()(x))
    method = load_method(ckpt)
    assert isinstance(method, NCL) and isinstance(method.backbone, cls)
    # a run configured with pretrained weights: reading its checkpoint downloads nothing
    asked = _as_if_pretrained(ckpt, tmp_path / "pretrained.ckpt", key, value)
    _same_weights(load_backbone(asked), trained)
    assert load_backbone(asked).spec["init_args"][key] in (False, None)
    _same_weights(load_method(asked).backbone, trained)


@pytest.mark.slow
def test_a_users_own_module_is_a_backbone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``class_path: my_nets.MyNet``: any nn.Module with ``out_dim``; its checkpoint loads
    where the module is trusted (``$NCL_TRUSTED_MODULES``), and is refused elsewhere."""
    (tmp_path / "my_nets.py").write_text(textwrap.dedent(USER_MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv(TRUSTED_ENV, raising=False)
    ckpt, trained = _fit_and_test(
        tmp_path, [BB, "my_nets.MyNet", f"{BB}.width", "24"]
    )  # ncl-cli trusts the modules its config names
    with pytest.raises(CheckpointError, match=r"my_nets\.MyNet.*not trusted"):
        load_backbone(ckpt)  # outside ncl-cli: not imported unless trusted
    monkeypatch.setenv(TRUSTED_ENV, "my_nets")
    _atlas(ckpt, tmp_path / "atlas")
    loaded = load_backbone(ckpt)
    assert type(loaded).__name__ == "MyNet" and loaded.out_dim == 24
    _same_weights(loaded, trained)
    assert type(load_method(ckpt).backbone).__name__ == "MyNet"


VIT_CONFIGS = sorted((ROOT / "configs").glob("imagenet100_*_vit.yaml"))


@pytest.mark.slow
@pytest.mark.parametrize("config", VIT_CONFIGS, ids=[c.stem for c in VIT_CONFIGS])
def test_each_vit_config_trains_its_method_with_its_optimiser(config: Path, tmp_path: Path) -> None:
    """The shipped ViT configs' backbone class, AdamW and (BayesNCL) gate settings, on the
    digits method of the same name with a tiny ViT: one step, then the optimiser's groups
    against the config's values by hand."""
    shipped = yaml.safe_load(config.read_text())["model"]
    method = config.stem.removeprefix("imagenet100_").removesuffix("_vit")
    assert shipped["init_args"]["backbone"]["class_path"] == "ncl_lightning.nn.TimmBackbone"
    overlay = {"model": {"init_args": {
        "optimizer": shipped["init_args"]["optimizer"],
        **{k: v for k, v in shipped["init_args"].items()
           if k.startswith("gate") or k == "probe_lr"},
    }}}  # fmt: skip
    (tmp_path / "overlay.yaml").write_text(yaml.safe_dump(overlay))
    common = _common(tmp_path, TIMM_VIT)
    common[1] = str(ROOT / "configs" / "demo" / f"digits_{method}.yaml")
    fit = cli_main(["fit", *common, "--config", str(tmp_path / "overlay.yaml"),
                    "--trainer.max_epochs", "1", "--trainer.limit_train_batches", "1",
                    "--trainer.limit_val_batches", "0"])  # fmt: skip
    assert type(fit.model).__name__ == shipped["class_path"].rpartition(".")[2]
    (optimizer,) = fit.trainer.optimizers
    opt_args = shipped["init_args"]["optimizer"]["init_args"]
    assert type(optimizer) is torch.optim.AdamW
    groups = optimizer.param_groups
    base = opt_args["lr"] * 32 / 256  # scale_lr: global batch 32
    probe = shipped["init_args"]["probe_lr"] * 32 / 256  # the online probe, no decay
    expected = [(base, opt_args["weight_decay"]), (base, 0.0), (probe, 0.0)]
    if method == "bayesncl":  # the gating head: its weights, then its biases, at gate_lr
        gate_lr = shipped["init_args"]["gate_lr"]
        expected += [(gate_lr, opt_args["weight_decay"]), (gate_lr, 0.0)]
    got = [(g["initial_lr"], g["weight_decay"]) for g in groups]
    assert len(got) == len(expected) and all(
        a == pytest.approx(b) for pair, want in zip(got, expected, strict=True)
        for a, b in zip(pair, want, strict=True)
    ), got  # fmt: skip
    assert all(tuple(g["betas"]) == tuple(opt_args["betas"]) for g in groups)
