"""export_backbone: torchvision / timm key mapping, the model card, the hub folder, errors."""

from __future__ import annotations

import csv
import json
import re
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import torchvision
import yaml
from safetensors.torch import load_file

from ncl_lightning import CheckpointError, ConfigError, load_backbone
from ncl_lightning.checkpoints.check import CheckpointNotFoundError
from ncl_lightning.checkpoints.export import (
    TORCHVISION_FILE,
    compare_keys,
    export_backbone,
    key_maps,
)
from ncl_lightning.checkpoints.load import RECORD_KEY
from ncl_lightning.nn import ResNet, SmallCNN

HUB_FILES = {"README.md", "config.json", "model.safetensors"}


def _randomised(net: torch.nn.Module) -> torch.nn.Module:
    """Random BatchNorm statistics and affine parameters, so eval features depend on them."""
    torch.manual_seed(0)
    for module in net.modules():
        if isinstance(module, torch.nn.BatchNorm2d):
            module.running_mean.normal_(0, 0.1)
            module.running_var.uniform_(0.5, 1.5)
            module.weight.data.uniform_(0.5, 1.5)
            module.bias.data.normal_(0, 0.1)
    return net.eval()


def _bn(x: torch.Tensor, s: dict, name: str) -> torch.Tensor:
    return F.batch_norm(x, s[f"{name}.running_mean"], s[f"{name}.running_var"],
                        s[f"{name}.weight"], s[f"{name}.bias"], False, 0.0, 1e-5)  # fmt: skip


def reference_resnet18(s: dict, x: torch.Tensor) -> torch.Tensor:
    """ResNet-18 (He et al., 2016; torchvision's layout) written out from a state dict keyed
    as torchvision names it: the slow obvious meaning of each key."""
    x = F.relu(_bn(F.conv2d(x, s["conv1.weight"], stride=2, padding=3), s, "bn1"))
    x = F.max_pool2d(x, 3, 2, 1)
    for layer in range(1, 5):
        for block in range(2):
            p = f"layer{layer}.{block}"
            stride = 2 if layer > 1 and block == 0 else 1
            out = F.relu(_bn(F.conv2d(x, s[f"{p}.conv1.weight"], stride=stride, padding=1),
                             s, f"{p}.bn1"))  # fmt: skip
            out = _bn(F.conv2d(out, s[f"{p}.conv2.weight"], padding=1), s, f"{p}.bn2")
            if f"{p}.downsample.0.weight" in s:
                x = _bn(F.conv2d(x, s[f"{p}.downsample.0.weight"], stride=stride), s,
                        f"{p}.downsample.1")  # fmt: skip
            x = F.relu(out + x)
    return x.mean(dim=(2, 3))


def front_matter(card: str) -> dict:
    found = re.match(r"^---\n(.*?)\n---\n", card, re.S)
    assert found, "README.md does not start with a YAML front matter block"
    return yaml.safe_load(found[1])


def test_imagenet_resnet18_loads_into_torchvision_with_only_fc_missing(tmp_path: Path) -> None:
    ours = _randomised(ResNet(18, "imagenet"))
    out = export_backbone(ours, tmp_path / "export", format="all")
    state = torch.load(out / TORCHVISION_FILE, weights_only=True)
    net = torchvision.models.resnet18(weights=None).eval()
    missing, unexpected = net.load_state_dict(state, strict=False)
    assert sorted(missing) == ["fc.bias", "fc.weight"] and unexpected == []
    assert len(net.state_dict()) == 122 and len(state) == 120  # 120 of 122 keys are ours
    net.fc = torch.nn.Identity()
    net.load_state_dict(state, strict=True)
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        expected = reference_resnet18(state, x)
        torch.testing.assert_close(ours(x), expected, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(net(x), expected, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(load_backbone(out).eval()(x), ours(x), rtol=0, atol=0)
    config = json.loads((out / "config.json").read_text())
    assert config["torchvision"]["architecture"] == "resnet18" and config["torchvision"]["exact"]
    assert config["torchvision"]["keys"]["missing"] == ["fc.bias", "fc.weight"]
    assert config["torchvision"]["keys"]["same"] == 120


def test_imagenet_resnet18_is_timms_resnet18(tmp_path: Path) -> None:
    timm = pytest.importorskip("timm")
    ours = _randomised(ResNet(18, "imagenet"))
    out = export_backbone(ours, tmp_path / "export", format="timm")
    net = timm.create_model("resnet18", pretrained=False, num_classes=0).eval()
    net.load_state_dict(load_file(out / "model.safetensors"), strict=True)
    folder = timm.create_model(f"local-dir:{out}", pretrained=True).eval()  # no network
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(net(x), ours(x), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(folder(x), ours(x), rtol=1e-5, atol=1e-5)
    assert front_matter((out / "README.md").read_text())["library_name"] == "timm"


def test_cifar_stem_maps_all_keys_but_conv1s_shape(tmp_path: Path) -> None:
    ours = _randomised(ResNet(18, "cifar"))
    out = export_backbone(ours, tmp_path / "export", format="torchvision")
    keys = json.loads((out / "config.json").read_text())["torchvision"]["keys"]
    assert keys["shape_differs"] == ["conv1.weight"] and keys["unexpected"] == []
    assert keys["missing"] == ["fc.bias", "fc.weight"] and keys["same"] == 119
    # The card's own torchvision snippet (conv1 and maxpool replaced) gives our features.
    card = (out / "README.md").read_text()
    snippet = next(b for b in re.findall(r"```python\n(.*?)```", card, re.S) if "torchvision" in b)
    assert "net.maxpool = torch.nn.Identity()" in snippet
    scope: dict = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(out)
        exec(snippet, scope)
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(scope["net"].eval()(x), ours(x), rtol=1e-5, atol=1e-5)
    with pytest.raises(ConfigError, match="format: 'timm' does not apply"):
        export_backbone(ours, tmp_path / "timm", format="timm")
    assert not (tmp_path / "timm").exists()


@pytest.mark.parametrize(("depth", "theirs"), [(18, 122), (34, 218), (50, 320)])
def test_every_resnet_depth_has_torchvisions_keys(depth: int, theirs: int) -> None:
    net = ResNet(depth, "imagenet")
    keys = compare_keys(net.state_dict(), key_maps(net)["torchvision"])
    assert keys == {"theirs": theirs, "same": theirs - 2, "missing": ["fc.bias", "fc.weight"],
                    "unexpected": [], "shape_differs": []}  # fmt: skip


def _fake_run(tmp_path: Path, git: dict | None) -> Path:
    """A checkpoint of a run folder written as ncl-cli does, with metrics after its step."""
    run = tmp_path / "run" / "version_0"
    (run / "checkpoints").mkdir(parents=True)
    backbone = SmallCNN(1, 8, 24)
    ckpt = {
        "state_dict": {f"backbone.{k}": v for k, v in backbone.state_dict().items()},
        "epoch": 3, "global_step": 10, "pytorch-lightning_version": "2.6.6",
        "hyper_parameters": {"_class_path": "ncl_lightning.methods.NCL", "temperature": 0.2,
                             "_instantiator": "lightning.pytorch.cli.instantiate_module"},
        "datamodule_hyper_parameters": {"_class_path": "ncl_lightning.data.CIFAR10DataModule"},
        "callbacks": {"ModelCheckpoint{}": {"monitor": "val/knn_acc",
                                            "best_model_score": torch.tensor(0.5)}},
        RECORD_KEY: {"format": 2, "method": "ncl_lightning.methods.ncl.NCL",
                     "backbone": backbone.spec, "run": {"id": "version_0", "folder": str(run)}},
    }  # fmt: skip
    path = run / "checkpoints" / "last.ckpt"
    torch.save(ckpt, path)
    with (run / "metrics.csv").open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["epoch", "step", "val/knn_acc", "train/loss"])
        writer.writerows([[0, 4, 0.25, ""], [1, 9, "", 1.5], [2, 12, 0.99, 0.1]])
    if git is not None:
        run_yaml = {"host": "secret-host", "cwd": "/home/secret", "git": {"ncl_lightning": git},
                    "versions": {"ncl-lightning": "0.1.0", "torch": "2.14.1"}}  # fmt: skip
        (run / "run.yaml").write_text(yaml.safe_dump(run_yaml))
    return path


def test_the_card_states_what_the_checkpoint_says(tmp_path: Path) -> None:
    path = _fake_run(tmp_path, {"commit": "abc123def", "dirty": True})
    out = export_backbone(path, tmp_path / "export")
    card = (out / "README.md").read_text()
    meta = front_matter(card)
    assert {"library_name", "tags", "license", "datasets", "metrics"} <= set(meta)
    assert meta["datasets"] == ["uoft-cs/cifar10"] and meta["metrics"] == ["accuracy"]
    assert "ncl" in meta["tags"] and meta["license"] == "mit"
    assert "`ncl_lightning.methods.ncl.NCL`: NCL: Non-negative Contrastive Learning" in card
    assert "commit `abc123def` (with uncommitted changes)" in card
    assert "| `val/knn_acc` | 0.25 | 0 | 4 |" in card  # the row after step 10 is not used
    assert "| `train/loss` | 1.5 | 1 | 9 |" in card and "0.99" not in card
    assert "Best `val/knn_acc` monitored by ModelCheckpoint (from the checkpoint): 0.5" in card
    assert "temperature: 0.2" in card and "_instantiator" not in card
    assert "secret" not in card and str(tmp_path) not in card  # no host, cwd or paths


def test_a_card_without_a_run_folder_says_so(tmp_path: Path) -> None:
    path = _fake_run(tmp_path, None)
    (path.parent.parent / "metrics.csv").unlink()
    lone = tmp_path / "lone.ckpt"
    ckpt = torch.load(path, weights_only=True)
    del ckpt[RECORD_KEY]["run"], ckpt["callbacks"]
    torch.save(ckpt, lone)
    card = (export_backbone(lone, tmp_path / "export") / "README.md").read_text()
    assert "None found: the checkpoint stores no logged metrics" in card
    assert "commit `not recorded`" in card
    assert front_matter(card)["metrics"] == []


def test_the_folder_is_what_the_hub_needs(tmp_path: Path) -> None:
    out = export_backbone(_fake_run(tmp_path, None), tmp_path / "export")
    assert {p.name for p in out.iterdir()} == HUB_FILES
    hub = pytest.importorskip("huggingface_hub")
    meta = hub.metadata_load(out / "README.md")  # the hub's own reader, offline
    card = hub.ModelCard.load(out / "README.md")  # a local path: read, not downloaded
    assert card.data.license == "mit" and card.data.tags and "## How to load" in card.text
    assert meta["library_name"] == "pytorch" and meta["pipeline_tag"] == "image-feature-extraction"
    config = json.loads((out / "config.json").read_text())
    assert config["class_path"] == "ncl_lightning.nn.SmallCNN" and config["out_dim"] == 24
    from safetensors import safe_open

    with safe_open(out / "model.safetensors", "pt") as f:
        assert f.metadata() == {"format": "pt"}  # what the hub and transformers expect
        assert set(f.keys()) == set(SmallCNN(1, 8, 24).state_dict())


def test_load_backbone_reads_the_folder_and_its_weights_file(tmp_path: Path) -> None:
    path = _fake_run(tmp_path, None)
    out = export_backbone(path, tmp_path / "export")
    x = torch.randn(3, 1, 8, 8)
    original = load_backbone(path).eval()
    for source in (out, out / "model.safetensors"):
        again = load_backbone(source).eval()
        assert isinstance(again, SmallCNN) and again.spec == original.spec
        assert torch.equal(again(x), original(x))


def test_bad_inputs_are_one_line_errors_before_anything_is_written(tmp_path: Path) -> None:
    with pytest.raises(CheckpointNotFoundError, match=r"checkpoint: no such file: .*nope\.ckpt"):
        export_backbone(tmp_path / "nope.ckpt", tmp_path / "a")
    with pytest.raises(ConfigError, match="format must be one of"):
        export_backbone(SmallCNN(), tmp_path / "a", format="onnx")
    with pytest.raises(ConfigError, match="checkpoint: Linear has no `spec`"):
        export_backbone(torch.nn.Linear(2, 2), tmp_path / "a")
    with pytest.raises(ConfigError, match="format: 'torchvision' does not apply to SmallCNN"):
        export_backbone(SmallCNN(), tmp_path / "a", format="torchvision")
    assert not (tmp_path / "a").exists()
    full = tmp_path / "full"
    full.mkdir()
    (full / ".gitattributes").write_text("keep me")
    with pytest.raises(ConfigError, match=r"out_dir: .*full exists and is not empty.*--overwrite"):
        export_backbone(SmallCNN(), full)
    assert [p.name for p in full.iterdir()] == [".gitattributes"]
    export_backbone(ResNet(18, "cifar"), full, format="all", overwrite=True)
    export_backbone(SmallCNN(), full, overwrite=True)  # the stale torchvision file goes
    assert {p.name for p in full.iterdir()} == HUB_FILES | {".gitattributes"}


def test_a_folder_without_config_or_with_an_untrusted_class_is_refused(tmp_path: Path) -> None:
    out = export_backbone(SmallCNN(), tmp_path / "export")
    (out / "config.json").rename(tmp_path / "config.json")
    with pytest.raises(CheckpointError, match=r"export: no config\.json"):
        load_backbone(out)
    config = json.loads((tmp_path / "config.json").read_text())
    config["class_path"] = "evil_module_xyz.Net"
    (out / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=r"'evil_module_xyz\.Net' from a module that is not"):
        load_backbone(out)
    assert "evil_module_xyz" not in sys.modules
    with pytest.raises(CheckpointNotFoundError, match="exported backbone not found"):
        load_backbone(tmp_path / "missing.safetensors")


def test_the_checkpoint_is_read_once_and_the_round_trip_still_matches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _fake_run(tmp_path, None)
    original = load_backbone(path).eval()
    reads: list[str] = []
    real_load = torch.load

    def counting_load(f, *args, **kwargs):
        reads.append(str(f))
        return real_load(f, *args, **kwargs)

    monkeypatch.setattr(torch, "load", counting_load)
    out = export_backbone(path, tmp_path / "export")
    assert reads == [str(path)]  # the backbone and the card share one read
    monkeypatch.undo()
    again = load_backbone(out).eval()
    x = torch.randn(3, 1, 8, 8)
    assert again.spec == original.spec and torch.equal(again(x), original(x))
    assert "ncl_lightning.methods" in (out / "README.md").read_text()  # the card's facts


def test_forged_sizes_in_config_json_are_refused_before_anything_is_allocated(
    tmp_path: Path,
) -> None:
    """A ``config.json`` edited to a huge ``out_dim`` (5 * 10^11 weights, 2 TB in float32)
    is compared with the weights' shapes on the meta device: one line, nothing allocated."""
    out = export_backbone(SmallCNN(in_channels=1, width=4, out_dim=8), tmp_path / "export")
    config = json.loads((out / "config.json").read_text())
    config["init_args"]["out_dim"] = 10**12 // 16  # fc: [out_dim, 8]
    (out / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError) as err:
        load_backbone(out)
    assert str(err.value).startswith(f"{out / 'config.json'}: the architecture it describes "
                                     "does not fit model.safetensors (")  # fmt: skip
    assert "by the config" in str(err.value) and "\n" not in str(err.value)
