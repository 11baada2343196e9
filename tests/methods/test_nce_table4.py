"""NCL paper Table 4: CE and NCE without a projector, and NCE fine-tuned from a CL checkpoint.

* ``configs/nce/overlays/no_projector.yaml`` on an NCE config: no projector, ``z`` is the
  ReLU'd backbone output (the backbone output itself under CE), the classifier reads
  ``backbone.out_dim`` features; on every paper and demo CE/NCE config alike.
* ``configs/{nce,demo}/*_nce_finetune.yaml`` refuse to start without
  ``model.init_args.pretrained`` (one line, nothing written) and, given a CL run's
  checkpoint, start from exactly its backbone (compared with a plain ``torch.load`` of the
  checkpoint) and train.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from ncl_lightning.data import load_imagenet100_classes
from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.methods import NCEClassifier
from ncl_lightning.nn import ResNet, SmallCNN
from ncl_lightning.runtime.cli import cli_main
from tests.conftest import ROOT
from tests.fakes import make_image_folder
from tests.helpers.cli import refused_fit
from tests.helpers.paper_configs import Resolver
from tests.helpers.start_weights import CALLBACK, at_start, backbone_of, same

CONFIGS = ROOT / "configs"
OVERLAY = CONFIGS / "nce" / "overlays" / "no_projector.yaml"
FINETUNE = (
    "../nce/imagenet100_nce_finetune", "../nce/cifar10_nce_finetune", "digits_nce_finetune",
    "../nce/imagenet100_ce_finetune", "../nce/cifar10_ce_finetune",
)  # fmt: skip
OURS = CONFIGS / "nce" / "overlays" / "bn_sgd_cosine.yaml"
CPU = [
    "--trainer.accelerator", "cpu", "--trainer.devices", "1", "--trainer.strategy", "auto",
    "--trainer.precision", "32-true", "--trainer.enable_progress_bar", "false",
    "--trainer.enable_model_summary", "false", "--trainer.num_sanity_val_steps", "0",
]  # fmt: skip
MISSING = (
    "ncl-cli: error: model.init_args.pretrained is required: this config fine-tunes a "
    "pretrained backbone (require_pretrained: true); give --model.init_args.pretrained "
    "<a CL run's last.ckpt>"
)


def fit(config: Path, out: Path, *extra: str) -> Any:
    """``ncl-cli fit --config <config> <extra>`` in this process, into ``out``, CSV logs."""
    args = [
        "fit", "--config", str(config), *CPU,
        "--trainer.logger", "lightning.pytorch.loggers.CSVLogger",
        "--trainer.logger.init_args.save_dir", str(out),
        "--trainer.default_root_dir", str(out), *extra,
    ]  # fmt: skip
    return cli_main(args)


# -- without a projector ------------------------------------------------------------------
@pytest.mark.parametrize("loss", ["nce", "ce"])
def test_no_projector_overlay_on_digits_trains_with_z_the_backbone_output(
    loss: str, tmp_path: Path
) -> None:
    steps = ["--trainer.max_epochs", "1", "--trainer.limit_train_batches", "2",
             "--trainer.limit_val_batches", "1", "--config", str(OVERLAY)]  # fmt: skip
    cli = fit(CONFIGS / "demo" / f"digits_{loss}.yaml", tmp_path, *steps)
    model = cli.model.eval()
    assert cli.trainer.global_step == 2
    assert isinstance(model.projector, nn.Identity)
    assert model.classifier.in_features == model.backbone.out_dim == 128
    x, _ = next(iter(cli.datamodule.val_dataloader()))
    with torch.no_grad():
        h, z = model.backbone(x), model.encode(x).z
    if loss == "nce":  # z = ReLU(h): non-negative, sparse where h < 0
        assert torch.equal(z, torch.relu(h)) and (h < 0).any() and (z == 0).any()
        assert (model.classifier.effective_weight() >= 0).all()
    else:  # CE: the backbone output itself, negative entries kept
        assert torch.equal(z, h) and (z < 0).any()


@pytest.fixture(scope="module")
def resolver() -> Resolver:
    return Resolver(CONFIGS / "nce" / "cifar10_nce.yaml")


@pytest.mark.parametrize(
    ("base", "width"),
    [("nce/imagenet100_nce.yaml", 512), ("nce/cifar10_ce.yaml", 512),
     ("nce/imagenet100_nce_finetune.yaml", 512), ("subset/cifar10_subset_nce.yaml", 512)],
)  # fmt: skip
def test_no_projector_overlay_changes_only_the_projector_sizes(
    resolver: Resolver, base: str, width: int
) -> None:
    """Resolved as ``ncl-cli fit --config <base> --config <overlay>``: the two projector
    sizes are 0 and every other key is the base's; the model built from it has none."""
    plain = resolver.parser.parse_args(["fit", "--config", str(CONFIGS / base)])
    over = resolver.parser.parse_args(["fit", "--config", str(CONFIGS / base),
                                       "--config", str(OVERLAY)])  # fmt: skip
    a, b = plain["fit"].clone().as_dict(), over["fit"].clone().as_dict()
    a.pop("config"), b.pop("config")
    base_args, overlaid = a.pop("model")["init_args"], b.pop("model")["init_args"]
    changed = {k for k in base_args if base_args[k] != overlaid[k]}
    assert changed == {"proj_hidden_dim", "proj_output_dim"}
    assert a == b  # trainer, data, seed: the base's
    init = over["fit"]["model"]["init_args"].as_dict()
    assert (init["proj_hidden_dim"], init["proj_output_dim"]) == (0, 0)
    spec = init["backbone"]
    backbone = ResNet(**spec["init_args"]) if spec["class_path"].endswith("ResNet") else (
        SmallCNN(**spec["init_args"]))  # fmt: skip
    model = NCEClassifier(backbone, num_classes=10, loss=init["loss"], proj_hidden_dim=0,
                          proj_output_dim=0)  # fmt: skip
    assert isinstance(model.projector, nn.Identity) and model.classifier.in_features == width


def _resolved(resolver: Resolver, *configs: Path) -> dict[str, Any]:
    """``ncl-cli fit --config <each>`` resolved: the fit section without ``config``."""
    args = ["fit", *(a for c in configs for a in ("--config", str(c)))]
    out = resolver.parser.parse_args(args)["fit"].clone().as_dict()
    out.pop("config")
    return out


def _differences(a: Any, b: Any, prefix: str = "") -> set[str]:
    """Dotted keys where two resolved configs differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        keys = set(a) | set(b)
        return {d for k in keys for d in _differences(a.get(k), b.get(k), f"{prefix}{k}.")}
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return {
            d
            for i, (x, y) in enumerate(zip(a, b, strict=True))
            for d in _differences(x, y, f"{prefix}{i}.")
        }
    return set() if a == b else {prefix.rstrip(".")}


NAME = {"trainer.logger.init_args.name", "trainer.logger.init_args.job_type"}


@pytest.mark.parametrize("dataset", ["imagenet100", "cifar10"])
def test_ce_finetune_is_the_nce_finetune_with_cross_entropy(
    resolver: Resolver, dataset: str
) -> None:
    """Table 4's fine-tuned CE row: the NCE fine-tune config with ``loss: ce``, and each
    fine-tune config is its from-scratch config started from a checkpoint for 50 epochs."""
    nce = _resolved(resolver, CONFIGS / "nce" / f"{dataset}_nce_finetune.yaml")
    ce = _resolved(resolver, CONFIGS / "nce" / f"{dataset}_ce_finetune.yaml")
    assert _differences(nce, ce) - NAME == {"model.init_args.loss"}
    assert (ce["model"]["init_args"]["loss"], nce["model"]["init_args"]["loss"]) == ("ce", "nce")
    for loss, tuned in (("ce", ce), ("nce", nce)):
        scratch = _resolved(resolver, CONFIGS / "nce" / f"{dataset}_{loss}.yaml")
        assert _differences(scratch, tuned) - NAME == {
            "trainer.max_epochs", "model.init_args.require_pretrained",
        }  # fmt: skip
        assert (scratch["trainer"]["max_epochs"], tuned["trainer"]["max_epochs"]) == (100, 50)


@pytest.mark.parametrize("name", ["ce", "nce", "ce_finetune", "nce_finetune"])
def test_imagenet100_configs_follow_app_g6_and_the_overlay_restores_ours(
    resolver: Resolver, name: str
) -> None:
    """NCL paper App. G.6: SimCLR's projector (no BatchNorm) and the release's
    ``scripts/finetuning/imagenet-100/simclr.yaml`` (SGD lr 1.0 at batch 256, momentum 0.9,
    no weight decay, x0.1 at epochs 60 and 80, no warm-up); ``bn_sgd_cosine.yaml`` changes
    exactly those keys back to our recipe."""
    base = CONFIGS / "nce" / f"imagenet100_{name}.yaml"
    paper = _resolved(resolver, base)
    init = paper["model"]["init_args"]
    sgd = init["optimizer"]["init_args"]
    assert init["optimizer"]["class_path"] == "torch.optim.SGD"
    assert (sgd["lr"], sgd["momentum"], sgd["weight_decay"]) == (1.0, 0.9, 0.0)
    assert (init["lr_milestones"], init["lr_gamma"], init["warmup_epochs"]) == ([60, 80], 0.1, 0)
    assert init["scale_lr"] and paper["data"]["init_args"]["batch_size"] == 256
    assert (init["proj_hidden_dim"], init["proj_output_dim"], init["proj_batch_norm"]) == (
        16384, 2048, False,
    )  # fmt: skip
    ours = _resolved(resolver, base, OURS)
    assert _differences(paper, ours) == {
        "model.init_args.proj_batch_norm", "model.init_args.optimizer.init_args.lr",
        "model.init_args.optimizer.init_args.weight_decay", "model.init_args.warmup_epochs",
        "model.init_args.lr_milestones",
    }  # fmt: skip
    cifar = _resolved(resolver, CONFIGS / "nce" / f"cifar10_{name}.yaml")["model"]["init_args"]
    mine = ours["model"]["init_args"]
    for key in ("proj_batch_norm", "warmup_epochs", "lr_milestones", "optimizer"):
        assert mine[key] == cifar[key], key  # the overlay is the CIFAR-10 configs' recipe


# -- fine-tuned from a CL checkpoint ------------------------------------------------------
@pytest.mark.parametrize("config", FINETUNE)
def test_a_finetune_config_without_pretrained_stops_in_one_line(
    config: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Before anything is built or written: not a silent run from scratch."""
    assert refused_fit(config, [], tmp_path, capsys) == MISSING


def test_require_pretrained_from_python() -> None:
    with pytest.raises(ConfigError, match=r"^pretrained is required: ") as err:
        NCEClassifier(SmallCNN(1, 8, 16), num_classes=10, require_pretrained=True)
    assert err.value.key == "pretrained"
    with pytest.raises(ConfigError, match=r"^pretrained is required: "):
        NCEClassifier(SmallCNN(1, 8, 16), num_classes=10, pretrained="", require_pretrained=True)


def _finetune(cl: Path, finetune: Path, out: Path, *data: str) -> Any:
    """A CL run of ``cl`` (1 step), then ``finetune`` from its last.ckpt (2 steps); checks
    that the fine-tune started from exactly the CL backbone and then trained it. Neither
    validates (the kNN bank and feature statistics are not the subject; ModelCheckpoint
    writes last.ckpt at the end of the training epoch)."""
    steps = ["--trainer.max_epochs", "1", "--trainer.limit_val_batches", "0"]
    fit(cl, out / "cl", *data, *steps, "--trainer.limit_train_batches", "1")
    (checkpoint,) = (out / "cl").rglob("last.ckpt")
    cli = fit(finetune, out / "ft", *data, *steps, "--trainer.limit_train_batches", "2",
              "--model.init_args.pretrained", str(checkpoint), CALLBACK)  # fmt: skip
    reference = backbone_of(checkpoint)
    assert reference and same(at_start(out / "ft"), reference)
    assert cli.trainer.global_step == 2
    weights = {k: v.detach().cpu() for k, v in cli.model.backbone.named_parameters()}
    assert not same(weights, {k: reference[k] for k in weights})  # fine-tuned, not frozen
    return cli


@pytest.mark.slow
def test_cifar10_finetune_starts_from_the_cl_run_and_trains(tmp_path: Path) -> None:
    # a small 32 px folder: the validation's kNN bank encodes the whole training split
    root = make_image_folder(tmp_path / "cifar", ["a", "b", "c"], n=4, size=(32, 32))
    data = [
        "--data", "ncl_lightning.data.ImageFolderDataModule",
        "--data.init_args.root", str(root), "--data.init_args.image_size", "32",
        "--data.init_args.batch_size", "4", "--data.init_args.num_workers", "0",
    ]  # fmt: skip
    cli = _finetune(CONFIGS / "cifar10_cl.yaml", CONFIGS / "nce" / "cifar10_nce_finetune.yaml",
                    tmp_path, *data)  # fmt: skip
    assert cli.model.classifier.in_features == 2048  # the NCE projector, started fresh
    assert cli.model.backbone.spec["init_args"]["stem"] == "cifar"


@pytest.mark.slow
def test_imagenet100_finetune_starts_from_the_cl_run_and_trains(tmp_path: Path) -> None:
    wnids = load_imagenet100_classes()[:3]
    class_list = tmp_path / "classes.txt"
    class_list.write_text("\n".join(wnids) + "\n")
    root = make_image_folder(tmp_path / "imagenet", wnids, n=2, size=(64, 64))
    data = [  # batches of 2 at 224 px: a ResNet-18 step is most of this test's time
        "--data.init_args.root", str(root), "--data.init_args.class_list", str(class_list),
        "--data.init_args.batch_size", "2", "--data.init_args.num_workers", "0",
    ]  # fmt: skip
    cli = _finetune(CONFIGS / "imagenet100_cl.yaml",
                    CONFIGS / "nce" / "imagenet100_nce_finetune.yaml", tmp_path, *data)  # fmt: skip
    assert cli.model.classifier.in_features == 2048  # the NCE projector, started fresh
    assert cli.model.backbone.spec["init_args"]["stem"] == "imagenet"


@pytest.mark.slow
def test_digits_finetune_starts_from_the_cl_run_and_trains(tmp_path: Path) -> None:
    cli = _finetune(CONFIGS / "demo" / "digits_cl.yaml",
                    CONFIGS / "demo" / "digits_nce_finetune.yaml", tmp_path)  # fmt: skip
    assert cli.model.classifier.in_features == 128  # the NCE projector, started fresh
