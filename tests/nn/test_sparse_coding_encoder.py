"""Sparse-coding encoder, its thresholded activations, warm start and normalisation."""

from __future__ import annotations

import math

import pytest
import torch

from ncl_lightning.checkpoints.load import build_backbone_from_spec
from ncl_lightning.data.sparse_coding import random_dictionary
from ncl_lightning.metrics.functional.dictionary import dictionary_recovery
from ncl_lightning.nn import SparseCodingEncoder, ThresholdActivation
from ncl_lightning.nn.sparse_coding import normalize_weight_, warm_start_


def _reference_srelu(u: float, b: float) -> float:
    """Soft thresholding written out case by case."""
    if u > b:
        return u - b
    if u < -b:
        return u + b
    return 0.0


def test_srelu_is_soft_thresholding() -> None:
    act = ThresholdActivation(3, "srelu", bias_init=0.5)
    u = torch.tensor([[-2.0, -0.5, -0.2], [0.0, 0.3, 1.7]])
    out = act(u)
    for i in range(2):
        for j in range(3):
            assert out[i, j].item() == pytest.approx(_reference_srelu(u[i, j].item(), 0.5))
    relu = ThresholdActivation(3, "relu", bias_init=0.5)
    assert torch.equal(relu(u), (u - 0.5).clamp(min=0))
    assert isinstance(act.bias, torch.nn.Parameter)
    fixed = ThresholdActivation(3, bias_init=0.1, learn_bias=False)
    assert not any(True for _ in fixed.parameters()) and fixed.bias.shape == (3,)
    with pytest.raises(ValueError, match="kind must be one of 'srelu', 'relu', got 'gelu'"):
        ThresholdActivation(3, "gelu")  # type: ignore[arg-type]


def test_srelu_gradient_reaches_the_threshold() -> None:
    act = ThresholdActivation(2, "srelu", bias_init=0.1)
    act(torch.tensor([[1.0, -1.0]])).sum().backward()
    # d/db [ReLU(u - b) - ReLU(-u - b)] = -1 for u > b and +1 for u < -b.
    assert act.bias.grad.tolist() == [-1.0, 1.0]


@pytest.mark.parametrize("second_layer", [False, True])
@pytest.mark.parametrize("batch_norm", [False, True])
def test_encoder_shapes_and_spec_round_trip(second_layer: bool, batch_norm: bool) -> None:
    enc = SparseCodingEncoder(20, 30, batch_norm=batch_norm, second_layer=second_layer)
    assert enc(torch.randn(8, 20)).shape == (8, 30) and enc.out_dim == 30
    assert enc.dictionary_weight.shape == (30, 20)
    rebuilt = build_backbone_from_spec(enc.spec)
    rebuilt.load_state_dict(enc.state_dict())
    enc.eval(), rebuilt.eval()
    x = torch.randn(5, 20)
    assert torch.equal(enc(x), rebuilt(x))


def test_encoder_init_std_and_bad_arguments() -> None:
    torch.manual_seed(0)
    enc = SparseCodingEncoder(200, 300, init_std=0.05)
    assert enc.dictionary_weight.std().item() == pytest.approx(0.05, rel=0.05)
    with pytest.raises(ValueError, match="width must be an integer >= 1, got 0"):
        SparseCodingEncoder(10, 0)
    with pytest.raises(ValueError, match="init_std must be > 0"):
        SparseCodingEncoder(10, 10, init_std=0.0)
    with pytest.raises(ValueError, match="init_std must be > 0, got nan"):
        SparseCodingEncoder(10, 10, init_std=float("nan"))
    with pytest.raises(ValueError, match="activation must be one of 'srelu', 'relu', got 'gelu'"):
        SparseCodingEncoder(10, 10, activation="gelu")  # type: ignore[arg-type]


def test_warm_start_covers_every_atom_with_the_stated_noise() -> None:
    g = torch.Generator().manual_seed(0)
    p, d, m = 400, 10, 50
    dictionary = random_dictionary(p, d, g)
    weight = torch.empty(m, p)
    atoms = warm_start_(weight, dictionary, c=1.0, generator=g)
    assert set(atoms.tolist()) == set(range(d))
    noise = weight - dictionary.T[atoms]
    assert noise.std().item() == pytest.approx(1 / math.sqrt(p), rel=0.05)  # std p^(-c/2)
    close = torch.empty(m, p)
    warm_start_(close, dictionary, c=6.0, generator=g)
    assert dictionary_recovery(close, dictionary)["min"] > 0.999
    with pytest.raises(ValueError, match="c must be >= 0"):
        warm_start_(weight, dictionary, c=-1.0)
    with pytest.raises(ValueError, match="dictionary must have shape"):
        warm_start_(torch.empty(m, p + 1), dictionary, c=1.0)


def test_warm_start_with_fewer_rows_than_atoms() -> None:
    dictionary = random_dictionary(20, 10, torch.Generator().manual_seed(1))
    atoms = warm_start_(torch.empty(4, 20), dictionary, 1.0, torch.Generator().manual_seed(0))
    assert len(set(atoms.tolist())) == 4


@pytest.mark.parametrize(("mode", "dim"), [("rows", 1), ("columns", 0)])
def test_normalize_weight(mode: str, dim: int) -> None:
    weight = torch.randn(7, 5) * 3
    weight[2] = 0.0
    normalize_weight_(weight, mode)  # type: ignore[arg-type]
    norms = weight.norm(dim=dim)
    expected = torch.ones_like(norms)
    if mode == "rows":
        expected[2] = 0.0
    assert torch.allclose(norms, expected, atol=1e-6)
    with pytest.raises(ValueError, match="mode must be one of 'rows', 'columns', got 'both'"):
        normalize_weight_(weight, "both")  # type: ignore[arg-type]
