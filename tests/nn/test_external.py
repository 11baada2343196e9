"""TimmBackbone and TorchvisionBackbone against the library models they wrap, their CIFAR
stems, their one-line refusals, and checkpoints that never download weights."""

from __future__ import annotations

from pathlib import Path

import pytest
import timm
import torch
import torchvision
from torch import nn

from ncl_lightning import load_backbone
from ncl_lightning.checkpoints.load import RECORD_KEY, build_backbone_from_spec
from ncl_lightning.checkpoints.record import trained_backbone_spec
from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.nn import ResNet, TimmBackbone, TorchvisionBackbone
from ncl_lightning.runtime.cli import main
from tests.conftest import ROOT

TINY_VIT = {"name": "vit_tiny_patch16_224", "model_kwargs": {"depth": 1}}


def _copy_into(reference: nn.Module, ours: nn.Module) -> nn.Module:
    reference.load_state_dict(ours.model.state_dict())
    return reference.eval()


def test_timm_vit_with_the_cifar_stem_is_timms_vit_on_4x4_patches() -> None:
    ours = TimmBackbone(**TINY_VIT, cifar_stem=True).eval()
    assert ours.out_dim == 192
    assert ours.model.patch_embed.proj.kernel_size == (4, 4)
    assert ours.model.pos_embed.shape == (1, 1 + 8 * 8, 192)  # class token + 8x8 patches
    reference = _copy_into(
        timm.create_model("vit_tiny_patch16_224", num_classes=0, depth=1, img_size=32,
                          patch_size=4), ours
    )  # fmt: skip
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        # the class token after the final norm: timm's ``pre_logits`` by hand
        tokens = reference.forward_features(x)
        assert torch.equal(ours(x), tokens[:, 0])


def _side_after(side: int, stem_padding: int) -> tuple[int, int]:
    """By hand: (side after the 3x3 stride-1 conv1, side after layer4's three stride-2 3x3
    convs with padding 1), for a ResNet-18-like net without max-pool."""
    side = side + 2 * stem_padding - 3 + 1
    after = side
    for _ in range(3):
        after = (after + 2 * 1 - 3) // 2 + 1
    return side, after


def _same_stem_as_resnet(conv1: nn.Conv2d, x: torch.Tensor) -> None:
    """conv1 is ResNet's CIFAR stem: 3x3, stride 1, padded by 2 (the releases'), checked
    against a zero-padded correlation written out here."""
    ours = ResNet(18, stem="cifar", in_channels=x.shape[1]).conv1
    assert (conv1.kernel_size, conv1.stride, conv1.padding) == ((3, 3), (1, 1), (2, 2))
    assert (conv1.kernel_size, conv1.stride, conv1.padding) == (
        ours.kernel_size, ours.stride, ours.padding)  # fmt: skip
    padded = torch.zeros(x.shape[0], x.shape[1], x.shape[2] + 4, x.shape[3] + 4)
    padded[:, :, 2:-2, 2:-2] = x
    patches = padded.unfold(2, 3, 1).unfold(3, 3, 1)  # [B, C, H+2, W+2, 3, 3]
    expected = torch.einsum("bchwij,ocij->bohw", patches, conv1.weight)
    with torch.no_grad():
        torch.testing.assert_close(conv1(x), expected)


def test_timm_resnet_with_the_cifar_stem_is_resnets_stem() -> None:
    ours = TimmBackbone("resnet18", cifar_stem=True, in_chans=1).eval()
    conv1 = ours.model.conv1
    assert (conv1.kernel_size, conv1.stride, conv1.in_channels) == ((3, 3), (1, 1), 1)
    assert isinstance(ours.model.maxpool, nn.Identity) and ours.out_dim == 512
    net = ours.model
    x = torch.randn(2, 1, 32, 32)
    _same_stem_as_resnet(conv1, x)
    stem_side, final = _side_after(32, stem_padding=2)
    assert (stem_side, final) == (34, 5)
    with torch.no_grad():
        assert net.conv1(x).shape == (2, 64, stem_side, stem_side)
        maps = net.layer4(net.layer3(net.layer2(net.layer1(net.act1(net.bn1(net.conv1(x)))))))
        assert maps.shape == (2, 512, final, final)
        torch.testing.assert_close(ours(x), maps.mean(dim=(2, 3)))


def test_timm_deep_stem_resnet_with_the_cifar_stem_has_a_stride_1_first_conv() -> None:
    ours = TimmBackbone("resnet26d", cifar_stem=True)
    assert ours.model.conv1[0].stride == (1, 1) and isinstance(ours.model.maxpool, nn.Identity)
    assert ours(torch.randn(1, 3, 32, 32)).shape == (1, ours.out_dim) == (1, 2048)


def test_timm_other_models_by_name() -> None:
    ours = TimmBackbone("convnext_atto", drop_path_rate=0.1).eval()
    assert ours.out_dim == 320 == ours.model.num_features
    assert ours(torch.randn(2, 3, 32, 32)).shape == (2, 320)


def test_torchvision_resnet18_with_the_cifar_stem() -> None:
    ours = TorchvisionBackbone("resnet18", cifar_stem=True).eval()
    full = torchvision.models.resnet18(weights=None)
    assert ours.out_dim == full.fc.in_features == 512
    assert isinstance(ours.model.fc, nn.Identity) and isinstance(ours.model.maxpool, nn.Identity)
    net = ours.model
    x = torch.randn(2, 3, 32, 32)
    _same_stem_as_resnet(net.conv1, x)
    _, final = _side_after(32, stem_padding=2)
    with torch.no_grad():
        maps = net.layer4(net.layer3(net.layer2(net.layer1(net.relu(net.bn1(net.conv1(x)))))))
        assert maps.shape == (2, 512, final, final) == (2, 512, 5, 5)
        torch.testing.assert_close(ours(x), maps.mean(dim=(2, 3)))
        # the same maps as the package's ResNet with the same weights
        resnet = ResNet(18, stem="cifar").eval()
        resnet.load_state_dict(net.state_dict())
        torch.testing.assert_close(resnet(x), ours(x))


def test_torchvision_convnext_keeps_the_norm_before_its_classifier() -> None:
    ours = TorchvisionBackbone("convnext_tiny").eval()
    assert ours.out_dim == 768
    net = ours.model
    assert isinstance(net.classifier[0], nn.Module) and isinstance(net.classifier[2], nn.Identity)
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        expected = net.classifier[0](net.avgpool(net.features(x))).flatten(1)
        torch.testing.assert_close(ours(x), expected)


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (lambda: TimmBackbone("vit_tiny_patch16_22"),
         r"^name: unknown timm model 'vit_tiny_patch16_22'; did you mean 'vit_tiny_patch16_224'"),
        (lambda: TimmBackbone("convnext_atto", cifar_stem=True),
         r"^cifar_stem: timm model 'convnext_atto' \(timm.models.convnext\) has no CIFAR stem"),
        (lambda: TimmBackbone("resnet18", in_chans=0), r"^in_chans must be an integer >= 1"),
        (lambda: TimmBackbone(**TINY_VIT, patch_size=0), r"^patch_size must be an integer"),
        (lambda: TimmBackbone("resnet18", drop_path_rate=1.0), r"^drop_path_rate must be in"),
        (lambda: TimmBackbone("resnet18", model_kwargs={"nonsense": 1}),
         r"^model_kwargs: timm model 'resnet18' refused: .*nonsense"),
        (lambda: TorchvisionBackbone("resnet_18"),
         r"^name: unknown torchvision classification model 'resnet_18'; did you mean 'resnet18'"),
        (lambda: TorchvisionBackbone("fcn_resnet50"), r"^name: unknown torchvision"),
        (lambda: TorchvisionBackbone("convnext_tiny", cifar_stem=True),
         r"^cifar_stem: applies to torchvision ResNets .* not 'convnext_tiny'"),
        (lambda: TorchvisionBackbone("vgg11", in_channels=1), r"^in_channels: applies to"),
        (lambda: TorchvisionBackbone("resnet18", weights="NONSENSE"),
         r"^weights: 'resnet18' has no torchvision weights 'NONSENSE'; known: DEFAULT, "
         r"IMAGENET1K_V1$"),
        (lambda: TorchvisionBackbone("resnet18", weights="IMAGENET1K_V2"),
         r"^weights: .*known: DEFAULT, IMAGENET1K_V1; did you mean 'IMAGENET1K_V1'\?$"),
    ],
)  # fmt: skip
def test_a_bad_argument_is_one_line(build, match: str) -> None:
    with pytest.raises(ConfigError, match=match) as err:
        build()
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"class_path": "ncl_lightning.nn.TimmBackbone",
          "init_args": {"name": "resnet18", "pretrained": True}},
         {"name": "resnet18", "pretrained": False}),
        ({"class_path": "ncl_lightning.nn.external.TorchvisionBackbone",
          "init_args": {"name": "resnet18", "weights": "DEFAULT"}},
         {"name": "resnet18", "weights": None}),
        ({"class_path": "my_nets.TimmBackbone", "init_args": {"pretrained": True}},
         {"pretrained": True}),  # not ours: unchanged
    ],
)  # fmt: skip
def test_a_record_never_asks_for_pretrained_weights(spec, expected) -> None:
    for record_format in (1, 2):
        assert trained_backbone_spec(spec, record_format)["init_args"] == expected
    assert spec["init_args"] != expected or spec["class_path"].startswith("my_nets")


def test_a_spec_rebuilds_the_architecture_and_load_backbone_never_downloads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ours = TimmBackbone(**TINY_VIT, cifar_stem=True, in_chans=1)
    again = build_backbone_from_spec(ours.spec)
    assert {k: v.shape for k, v in again.state_dict().items()} == {
        k: v.shape for k, v in ours.state_dict().items()
    }
    asked = {**ours.spec, "init_args": {**ours.spec["init_args"], "pretrained": True}}
    state = {f"backbone.{k}": v for k, v in ours.state_dict().items()}
    path = tmp_path / "vit.ckpt"
    record = {"format": 2, "method": "ncl_lightning.methods.ncl.NCL", "backbone": asked}
    torch.save({"state_dict": state, RECORD_KEY: record}, path)
    create = timm.create_model

    def offline(name, pretrained=False, **kwargs):
        assert not pretrained, "load_backbone asked timm for pretrained weights"
        return create(name, pretrained=False, **kwargs)

    monkeypatch.setattr(timm, "create_model", offline)
    loaded = load_backbone(path).eval()
    x = torch.randn(2, 1, 32, 32)
    assert torch.equal(loaded(x), ours.eval()(x))


def test_a_backbones_own_spec_never_asks_for_weights(monkeypatch: pytest.MonkeyPatch) -> None:
    """Built from Python with pretrained weights (the libraries stubbed: no network), the
    module's ``spec`` (what exports and Python-built checkpoints record) asks for none."""
    stub = nn.Linear(1, 1)
    stub.num_features = 8
    monkeypatch.setattr(timm, "create_model", lambda name, pretrained, **kw: stub)
    assert TimmBackbone("resnet18", pretrained=True).spec["init_args"]["pretrained"] is False
    full = torchvision.models.resnet18(weights=None)
    monkeypatch.setattr(torchvision.models, "get_model", lambda name, weights, **kw: full)
    spec = TorchvisionBackbone("resnet18", weights="DEFAULT").spec
    assert spec["init_args"]["weights"] is None and spec["init_args"]["name"] == "resnet18"


@pytest.mark.parametrize(
    ("backbone", "expected"),
    [(["ncl_lightning.nn.TorchvisionBackbone", "--model.init_args.backbone.weights", "DEFAULT"],
      "weights: could not download torchvision's DEFAULT weights of 'resnet18' (https://"),
     (["ncl_lightning.nn.TimmBackbone", "--model.init_args.backbone.pretrained", "true"],
      "pretrained: could not get timm's pretrained weights of 'resnet18' (timm/resnet18")],
)  # fmt: skip
def test_weights_without_network_are_one_line_naming_them_exit_1(
    backbone: list[str],
    expected: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    """No network: torchvision's download fails at its first connection, timm's hub runs
    offline on an empty cache; each says what it could not get and where to put it."""
    import urllib.error
    import urllib.request

    from huggingface_hub import constants

    def no_network(*args, **kwargs):
        raise urllib.error.URLError("[Errno -2] Name or service not known")

    monkeypatch.setattr(urllib.request, "urlopen", no_network)
    monkeypatch.setattr(torch.hub, "urlopen", no_network)  # torch.hub's own name for it
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf"))
    hub = torch.hub.get_dir()
    torch.hub.set_dir(str(tmp_path / "hub"))
    try:
        with pytest.raises(SystemExit) as exit_info:
            main([
                "fit", "--config", str(ROOT / "configs" / "demo" / "digits_ncl.yaml"),
                "--trainer.default_root_dir", str(tmp_path / "out"),
                "--model.init_args.backbone", backbone[0], "--model.init_args.backbone.name",
                "resnet18", *backbone[1:],
            ])  # fmt: skip
    finally:
        torch.hub.set_dir(hub)
    assert exit_info.value.code == 1  # a fault, not bad input
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("ncl-cli: error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert expected in lines[0] and ("set weights: null" in lines[0]
                                     or "set pretrained: false" in lines[0]), lines[0]
    assert not (tmp_path / "out").exists()
