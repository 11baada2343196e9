"""The L1-penalised losses against slow references written here: "SCL + reg" (NCL paper
Table 5, App. D.2) and our InfoNCE + L1."""

from __future__ import annotations

import math

import pytest
import torch

from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.losses import (
    OBJECTIVES,
    InfoNCEL1Loss,
    SpectralL1Loss,
    feature_l1,
    info_nce,
    info_nce_l1,
    l1_penalty,
    spectral_contrastive,
    spectral_l1,
)
from ncl_lightning.losses.sparsity import L1_WEIGHT, SPECTRAL_L1_WEIGHT
from tests.losses.test_losses import reference_info_nce
from tests.losses.test_spectral import mixed_views, reference_rescale, reference_spectral_loss


def reference_l1(z1: torch.Tensor, z2: torch.Tensor) -> float:
    """Mean over the 2n rows of ``sum_j |z_j| / ||z||``, one row at a time."""
    total, rows = 0.0, [*z1.tolist(), *z2.tolist()]
    for row in rows:
        norm = math.sqrt(sum(v * v for v in row))
        total += sum(abs(v) for v in row) / norm
    return total / len(rows)


def test_matches_the_slow_reference() -> None:
    gen = torch.Generator().manual_seed(0)
    z1, z2 = torch.randn(6, 5, generator=gen), torch.randn(6, 5, generator=gen)
    got = info_nce_l1(z1, z2, temperature=0.3, l1_weight=0.25, gather_distributed=False)
    expected = reference_info_nce(z1, z2, 0.3) + 0.25 * reference_l1(z1, z2)
    assert got.item() == pytest.approx(expected, rel=1e-5)
    assert l1_penalty(z1, z2).item() == pytest.approx(reference_l1(z1, z2), rel=1e-6)


def test_penalty_is_one_for_one_hot_rows_and_sqrt_d_for_flat_rows() -> None:
    one_hot = torch.eye(4) * 3.0
    flat = -2.0 * torch.ones(4, 4)
    assert l1_penalty(one_hot, one_hot).item() == pytest.approx(1.0)
    assert l1_penalty(flat, flat).item() == pytest.approx(2.0)  # sqrt(4)
    assert l1_penalty(one_hot, flat).item() == pytest.approx(1.5)
    # scale-free: the penalty is on the normalised features InfoNCE compares
    assert l1_penalty(10 * flat, flat).item() == pytest.approx(2.0)


def test_zero_weight_is_info_nce_and_the_gradient_sparsifies() -> None:
    gen = torch.Generator().manual_seed(1)
    z1, z2 = torch.randn(8, 6, generator=gen), torch.randn(8, 6, generator=gen)
    plain = info_nce(z1, z2, 0.2, gather_distributed=False)
    assert torch.equal(info_nce_l1(z1, z2, 0.2, 0.0, gather_distributed=False), plain)
    # a descent step on the penalty alone makes the rows sparser (smaller L1 / L2)
    z = z1.clone().requires_grad_(True)
    l1_penalty(z, z).backward()
    stepped = (z - 0.05 * z.grad).detach()
    assert l1_penalty(stepped, stepped) < l1_penalty(z1, z1)


def test_registered_name_module_and_checks() -> None:
    loss = OBJECTIVES.build("info_nce_l1", temperature=0.5, gather_distributed=False)
    assert isinstance(loss, InfoNCEL1Loss)
    assert (loss.temperature, loss.l1_weight, loss.gather_distributed) == (0.5, L1_WEIGHT, False)
    z1, z2 = torch.randn(4, 3), torch.randn(4, 3)
    expected = info_nce_l1(z1, z2, 0.5, L1_WEIGHT, gather_distributed=False)
    assert torch.equal(loss(z1, z2), expected)
    with pytest.raises(ValueError, match=r"l1_weight must be >= 0, got -0\.1"):
        InfoNCEL1Loss(l1_weight=-0.1)
    with pytest.raises(ValueError, match="temperature must be"):
        InfoNCEL1Loss(temperature=0.0)
    with pytest.raises(ValueError, match="l1_weight must be >= 0"):
        info_nce_l1(z1, z2, l1_weight=float("nan"))


# -- SCL + reg (NCL paper Table 5) ---------------------------------------------------------
def reference_spectral_l1(z1: torch.Tensor, z2: torch.Tensor, weight: float, normalize: str,
                          mu: float) -> float:  # fmt: skip
    """The slow spectral loss plus ``weight`` times the mean over the ``2n`` rows of
    ``sum_j |f_j|``, ``f`` each row as the loss compares it."""
    rows = [reference_rescale(r, normalize, mu) for r in [*z1.tolist(), *z2.tolist()]]
    penalty = sum(sum(abs(v) for v in row) for row in rows) / len(rows)
    return reference_spectral_loss(z1, z2, normalize, mu) + weight * penalty


@pytest.mark.parametrize(("normalize", "mu"), [("ball", 1.0), ("ball", 0.5), ("sphere", 1.0),
                                               ("none", 1.0)])  # fmt: skip
@pytest.mark.parametrize("weight", [0.0, 0.01, 0.3])
def test_spectral_l1_matches_the_slow_reference(normalize: str, mu: float, weight: float) -> None:
    z1, z2 = mixed_views(seed=11)
    got = spectral_l1(z1, z2, weight, False, normalize, mu)
    expected = reference_spectral_l1(z1, z2, weight, normalize, mu)
    assert got.item() == pytest.approx(expected, rel=1e-5, abs=1e-6)


@pytest.mark.parametrize("normalize", ["ball", "sphere", "none"])
def test_spectral_l1_off_is_the_spectral_loss_and_on_adds_the_penalty(normalize: str) -> None:
    z1, z2 = mixed_views(seed=12)
    plain = spectral_contrastive(z1, z2, False, normalize)
    assert torch.equal(spectral_l1(z1, z2, 0.0, False, normalize), plain)
    on = spectral_l1(z1, z2, 0.5, False, normalize)
    assert on > plain + 0.1  # the penalty of these rows is far from 0
    # inside HaoChen et al.'s ball the penalty is the raw features' L1 norm
    small1, small2 = (
        0.1 * z1 / z1.norm(dim=1, keepdim=True),
        0.1 * z2 / z2.norm(dim=1, keepdim=True),
    )
    added = spectral_l1(small1, small2, 0.5, False, "ball") - spectral_contrastive(
        small1, small2, False, "ball"
    )
    raw = torch.cat([small1, small2]).abs().sum(dim=1).mean()
    assert added.item() == pytest.approx(0.5 * raw.item(), rel=1e-5)
    assert feature_l1(small1, small2).item() == pytest.approx(raw.item(), rel=1e-6)


@pytest.mark.parametrize("normalize", ["ball", "sphere", "none"])
def test_spectral_l1_gradients_are_finite_and_a_step_sparsifies(normalize: str) -> None:
    z1, z2 = mixed_views(seed=13)
    z1[0] = 0.0  # a dead row
    z1.requires_grad_(True)
    z2.requires_grad_(True)
    SpectralL1Loss(0.1, normalize, gather_distributed=False)(z1, z2).backward()
    assert torch.isfinite(z1.grad).all() and torch.isfinite(z2.grad).all()
    # a descent step on the penalty alone lowers the L1 norm the loss sees
    z = z2.detach().clone().requires_grad_(True)
    penalty = spectral_l1(z, z, 1.0, False, normalize) - spectral_contrastive(
        z, z, False, normalize
    )
    penalty.backward()
    stepped = (z - 0.01 * z.grad).detach()
    after = spectral_l1(stepped, stepped, 1.0, False, normalize) - spectral_contrastive(
        stepped, stepped, False, normalize
    )
    assert after < penalty.detach() - 1e-4


def test_spectral_l1_module_and_checks() -> None:
    loss = SpectralL1Loss(gather_distributed=False)
    assert (loss.l1_weight, loss.normalize, loss.mu) == (SPECTRAL_L1_WEIGHT, "sphere", 1.0)
    z1, z2 = mixed_views(seed=14)
    expected = spectral_l1(z1, z2, SPECTRAL_L1_WEIGHT, False, "sphere", 1.0)
    assert torch.equal(loss(z1, z2), expected)
    table5 = SpectralL1Loss(0.02, "ball", 1.0, gather_distributed=False)
    assert torch.equal(table5(z1, z2), spectral_l1(z1, z2, 0.02, False, "ball", 1.0))
    with pytest.raises(ConfigError, match=r"l1_weight must be >= 0, got -0\.1"):
        SpectralL1Loss(l1_weight=-0.1)
    with pytest.raises(ConfigError, match="normalize: unknown spectral normalisation"):
        SpectralL1Loss(normalize="l2")
    with pytest.raises(ConfigError, match="mu must be > 0"):
        SpectralL1Loss(mu=-1.0)
    with pytest.raises(ConfigError, match="does nothing with normalize: none"):
        SpectralL1Loss(normalize="none", mu=0.5)
    with pytest.raises(ConfigError, match="l1_weight must be >= 0"):
        spectral_l1(z1, z2, l1_weight=float("nan"))
