"""Non-negative maps: rep_relu forward/backward and the registry."""

from __future__ import annotations

import math

import pytest
import torch

from ncl_lightning.nn.nonneg import NONNEG, RepReLU, rep_relu


def test_rep_relu_forward_is_exactly_relu() -> None:
    x = torch.randn(64, 33) * 3
    assert torch.equal(rep_relu(x), torch.relu(x))


def test_rep_relu_gradient_is_gelu_derivative() -> None:
    x = torch.linspace(-4, 4, 101, dtype=torch.double, requires_grad=True)
    rep_relu(x).sum().backward()
    y = x.detach().clone().requires_grad_(True)
    torch.nn.functional.gelu(y).sum().backward()
    torch.testing.assert_close(x.grad, y.grad)
    # and against the closed form Φ(x) + x φ(x) at a few points, written out by hand
    for v in (-2.0, -0.5, 0.0, 1.3):
        phi = math.exp(-v * v / 2) / math.sqrt(2 * math.pi)
        cdf = 0.5 * (1 + math.erf(v / math.sqrt(2)))
        xv = torch.tensor(v, dtype=torch.double, requires_grad=True)
        rep_relu(xv).backward()
        assert xv.grad.item() == pytest.approx(cdf + v * phi, rel=1e-12)


def test_negative_inputs_still_get_gradient() -> None:
    x = torch.full((5,), -1.0, requires_grad=True)
    rep_relu(x).sum().backward()
    assert (x.grad < 0).all()  # GELU'(-1) < 0: a dead unit is pushed, unlike ReLU


@pytest.mark.parametrize("name", ["relu", "rep_relu", "softplus", "sigmoid", "exp"])
def test_every_registered_map_is_non_negative(name: str) -> None:
    out = NONNEG.build(name)(torch.randn(100, 10) * 5)
    assert (out >= 0).all()


def test_registry_accepts_class_and_instance_and_lists_names_on_error() -> None:
    assert isinstance(NONNEG.build(RepReLU), RepReLU)
    inst = RepReLU()
    assert NONNEG.build(inst) is inst
    with pytest.raises(
        ValueError, match="unknown non-negative map 'relu6'; valid names: exp, relu, rep_relu"
    ):
        NONNEG.build("relu6")
