"""MLP heads: the releases' Linear-ReLU-Linear projector and the BatchNorm switch."""

from __future__ import annotations

import torch
from torch import nn

from ncl_lightning.methods import CL, NCL, BayesNCL, NCEClassifier
from ncl_lightning.nn import MLP, SmallCNN


def test_mlp_without_batch_norm_is_linear_relu_linear() -> None:
    torch.manual_seed(0)
    mlp = MLP(6, 5, 4, batch_norm=False)
    assert [type(m) for m in mlp.net] == [nn.Linear, nn.ReLU, nn.Linear]
    x = torch.randn(3, 6)
    first, _, last = mlp.net
    reference = last(torch.relu(first(x)))  # written out by hand
    torch.testing.assert_close(mlp(x), reference)
    assert first.bias is not None  # no BatchNorm after it, so the bias is kept


def test_mlp_with_batch_norm_normalises_the_hidden_layer() -> None:
    mlp = MLP(6, 5, 4, batch_norm=True)
    assert [type(m) for m in mlp.net] == [nn.Linear, nn.BatchNorm1d, nn.ReLU, nn.Linear]
    assert mlp.net[0].bias is None  # BatchNorm's shift replaces it


def _norms(module: nn.Module) -> list[nn.Module]:
    return [m for m in module.modules() if isinstance(m, nn.BatchNorm1d)]


def test_the_methods_build_the_release_projector_by_default() -> None:
    backbone = SmallCNN(1, 16, 32)
    for cls in (CL, NCL, BayesNCL):
        model = cls(backbone, proj_hidden_dim=16, proj_output_dim=8, batch_size=8)
        assert not _norms(model.projector), cls.__name__
        switched = cls(backbone, proj_hidden_dim=16, proj_output_dim=8, batch_size=8,
                       proj_batch_norm=True)  # fmt: skip
        assert len(_norms(switched.projector)) == 1, cls.__name__
    gated = BayesNCL(backbone, proj_hidden_dim=16, proj_output_dim=8, batch_size=8)
    assert not _norms(gated.gating_head)
    # NCE keeps BatchNorm by default (without it NCE failed on digits)
    nce = NCEClassifier(backbone, num_classes=10, proj_hidden_dim=16, proj_output_dim=8)
    assert len(_norms(nce.projector)) == 1


def test_scl_projector_normalises_its_output_before_the_map() -> None:
    """The SCL release's projector (Linear–BN–ReLU–Linear–BN): every output dim has batch
    mean 0 and variance 1 in training, and spectral NCL's ReLU acts after that BatchNorm."""
    torch.manual_seed(0)
    mlp = MLP(6, 5, 4, batch_norm=True, output_batch_norm=True)
    assert [type(m) for m in mlp.net] == [
        nn.Linear, nn.BatchNorm1d, nn.ReLU, nn.Linear, nn.BatchNorm1d
    ]  # fmt: skip
    x = 3.0 + 2.0 * torch.randn(64, 6)
    out = mlp(x)
    torch.testing.assert_close(out.mean(0), torch.zeros(4), atol=1e-5, rtol=0)
    torch.testing.assert_close(out.var(0, unbiased=False), torch.ones(4), atol=1e-3, rtol=0)
    backbone = SmallCNN(1, 16, 32)
    ncl = NCL(backbone, proj_hidden_dim=16, proj_output_dim=8, batch_size=8,
              proj_batch_norm=True, proj_output_batch_norm=True)  # fmt: skip
    assert len(_norms(ncl.projector)) == 2
    images = torch.randn(32, 1, 28, 28)
    z = ncl.encode(images).z
    p = ncl.projector(ncl.backbone(images))
    torch.testing.assert_close(z, torch.relu(p))
    # about half of each normalised dim is below zero: the map zeroes it
    assert 0.3 < (z == 0).float().mean().item() < 0.7
