"""Backbone output shapes, stems, the ResNet constructors and errors."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from ncl_lightning.nn.backbones import ResNet, SmallCNN, resnet18, resnet34, resnet50


def test_resnet18_cifar_stem():
    net = ResNet(18, stem="cifar").eval()
    assert net.conv1.kernel_size == (3, 3) and net.conv1.stride == (1, 1)
    assert net.conv1.padding == (2, 2)  # the releases' (solo-learn), not SimCLR's 1
    assert isinstance(net.maxpool, nn.Identity) and isinstance(net.fc, nn.Identity)
    with torch.no_grad():
        out = net(torch.randn(2, 3, 32, 32))
    assert out.shape == (2, 512) and net.out_dim == 512


def test_resnet18_imagenet_stem_and_channels():
    net = ResNet(18, stem="imagenet", in_channels=1).eval()
    assert net.conv1.kernel_size == (7, 7) and isinstance(net.maxpool, nn.MaxPool2d)
    with torch.no_grad():
        out = net(torch.randn(2, 1, 64, 64))
    assert out.shape == (2, 512)


def test_resnet50_out_dim():
    net = resnet50(stem="cifar").eval()
    assert net.out_dim == 2048
    with torch.no_grad():
        assert net(torch.randn(1, 3, 16, 16)).shape == (1, 2048)


def test_resnet_keys_match_torchvision():
    keys = set(ResNet(34, stem="imagenet").state_dict())
    assert "conv1.weight" in keys and "layer4.2.bn2.weight" in keys
    assert not any(k.startswith("fc.") for k in keys)


def test_zero_init_residual():
    net = ResNet(18, zero_init_residual=True)
    assert torch.count_nonzero(net.layer1[0].bn2.weight) == 0


def test_small_cnn_on_digits_size():
    net = SmallCNN(in_channels=1, width=8, out_dim=16)
    out = net(torch.randn(4, 1, 8, 8))
    assert out.shape == (4, 16) and net.out_dim == 16
    out.sum().backward()  # trainable end to end


def test_resnet_constructors_pass_their_arguments_on():
    for build, depth, out_dim in ((resnet18, 18, 512), (resnet34, 34, 512), (resnet50, 50, 2048)):
        net = build(stem="imagenet", in_channels=1, zero_init_residual=True)
        assert isinstance(net, ResNet) and net.out_dim == out_dim
        assert net.spec["init_args"] == {
            "depth": depth, "stem": "imagenet", "in_channels": 1, "zero_init_residual": True,
            "stem_padding": 3,
        }  # fmt: skip
        assert net.conv1.in_channels == 1 and net.conv1.kernel_size == (7, 7)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"depth": 101}, "depth must be one of 18, 34, 50, got 101"),
        ({"stem": "tiny"}, "stem must be one of 'cifar', 'imagenet', got 'tiny'"),
        ({"in_channels": 0}, "in_channels must be an integer >= 1, got 0"),
        ({"stem_padding": -1}, "stem_padding must be an integer >= 0, got -1"),
        ({"stem_padding": 1.0}, r"stem_padding must be an integer >= 0, got 1\.0"),
    ],
)
def test_resnet_rejects_bad_args(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ResNet(**kwargs)


def test_small_cnn_rejects_bad_widths():
    with pytest.raises(ValueError, match="width must be an integer >= 1, got 0"):
        SmallCNN(width=0)
    with pytest.raises(ValueError, match=r"out_dim must be an integer >= 1, got 2\.5"):
        SmallCNN(out_dim=2.5)


def test_small_cnn_without_batch_norm_encodes_each_sample_alone():
    # Train mode: with BatchNorm a sample's features depend on the batch; without, they do
    # not (what makes a multi-process run equal one process on the global batch).
    torch.manual_seed(0)
    x = torch.randn(8, 1, 8, 8)
    plain = SmallCNN(width=4, out_dim=6, batch_norm=False).train()
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in plain.modules())
    torch.testing.assert_close(plain(x)[:4], plain(x[:4]))
    normed = SmallCNN(width=4, out_dim=6).train()
    assert not torch.allclose(normed(x)[:4], normed(x[:4]), atol=1e-4)
    assert plain.spec["init_args"]["batch_norm"] is False


def _reference_conv(x: torch.Tensor, weight: torch.Tensor, padding: int) -> torch.Tensor:
    """Stride-1 convolution, one output pixel at a time over an explicitly zero-padded
    image (no bias): the obvious definition, to check ``conv1`` against."""
    b, c, h, w = x.shape
    padded = torch.zeros(b, c, h + 2 * padding, w + 2 * padding, dtype=x.dtype)
    padded[:, :, padding : padding + h, padding : padding + w] = x
    k = weight.shape[-1]
    rows, cols = padded.shape[2] - k + 1, padded.shape[3] - k + 1
    out = torch.empty(b, weight.shape[0], rows, cols, dtype=x.dtype)
    for i in range(rows):
        for j in range(cols):
            window = padded[:, :, i : i + k, j : j + k]  # [B, C, k, k]
            out[:, :, i, j] = torch.einsum("bcuv,ocuv->bo", window, weight)
    return out


@pytest.mark.parametrize(("stem_padding", "size", "final"), [(None, 34, 5), (2, 34, 5), (1, 32, 4)])
def test_cifar_stem_maps_against_a_reference_convolution(stem_padding, size, final):
    # Padding 2 (default, the releases'): 32x32 images give 34x34 maps (5x5 after layer4);
    # padding 1 (the older runs') keeps 32x32 (4x4). The weights have the same shape.
    torch.manual_seed(0)
    net = ResNet(18, stem="cifar", stem_padding=stem_padding).double().eval()
    x = torch.randn(2, 3, 32, 32, dtype=torch.double)
    with torch.no_grad():
        maps = net.conv1(x)
        expected = _reference_conv(x, net.conv1.weight, 2 if stem_padding is None else stem_padding)
        deep = net.layer4(net.layer3(net.layer2(net.layer1(net.relu(net.bn1(maps))))))
        features = net(x)
    assert maps.shape == (2, 64, size, size) and deep.shape == (2, 512, final, final)
    torch.testing.assert_close(maps, expected)
    torch.testing.assert_close(features, deep.mean(dim=(2, 3)))
    assert net.conv1.weight.shape == (64, 3, 3, 3)
    assert net.spec["init_args"]["stem_padding"] == (2 if stem_padding is None else stem_padding)


def test_old_padding_loads_the_same_weights():
    # A state dict of either padding loads into the other (only the maps' size differs).
    old, new = ResNet(18, stem_padding=1), ResNet(18)
    new.load_state_dict(old.state_dict())
    assert torch.equal(new.conv1.weight, old.conv1.weight) and new.conv1.padding == (2, 2)


def test_imagenet_stem_padding_is_torchvisions_unless_given():
    assert ResNet(18, stem="imagenet").conv1.padding == (3, 3)
    net = ResNet(18, stem="imagenet", stem_padding=2)
    assert net.conv1.padding == (2, 2) and net.conv1.kernel_size == (7, 7)
