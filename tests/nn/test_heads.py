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
