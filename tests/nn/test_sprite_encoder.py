"""SpriteEncoder (Burgess et al., 2018): shapes, spec, and why it replaces SmallCNN
on dSprites (global average pooling cannot see where a sprite is)."""

from __future__ import annotations

import pytest
import torch

from ncl_lightning.data.dsprites import render_sprites
from ncl_lightning.nn import SmallCNN, SpriteEncoder


def test_shapes_and_non_negative_output():
    net = SpriteEncoder(in_channels=1, width=8, hidden_dim=32, out_dim=16)
    out = net(torch.rand(3, 1, 64, 64))
    assert out.shape == (3, 16) and net.out_dim == 16 and (out >= 0).all()
    out.sum().backward()
    assert net.features[0].weight.grad is not None


def test_spec_rebuild():
    net = SpriteEncoder(width=4, out_dim=8)
    assert net.out_dim == 8
    spec = net.spec
    assert spec["class_path"] == "ncl_lightning.nn.SpriteEncoder"
    rebuilt = SpriteEncoder(**spec["init_args"])
    rebuilt.load_state_dict(net.state_dict())  # same architecture, same keys


def test_position_survives_unlike_global_pooling():
    """Two sprites differing only in position (by 4 pooled pixels, far from the border):
    SmallCNN's features are identical, SpriteEncoder's are not."""
    factors = torch.tensor([[0, 5, 0, 12, 16], [0, 5, 0, 12, 16]])
    images = render_sprites(factors)
    images[1] = torch.roll(images[0], shifts=4, dims=-1)  # exact 4-px shift, no border
    torch.manual_seed(0)
    pooled, flat = SmallCNN(1, 8, 16).eval(), SpriteEncoder(1, 8, 32, 16).eval()
    with torch.no_grad():
        a, b = pooled(images)
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
        c, d = flat(images)
        assert (c - d).abs().max() > 1e-3


@pytest.mark.parametrize(
    ("kwargs", "culprit"),
    [({"in_channels": 0}, "in_channels"), ({"width": 0}, "width"),
     ({"hidden_dim": 0}, "hidden_dim"), ({"out_dim": 0}, "out_dim"),
     ({"image_size": 40}, "image_size")],
)  # fmt: skip
def test_bad_arguments_raise(kwargs, culprit):
    with pytest.raises(ValueError, match=culprit):
        SpriteEncoder(**kwargs)
