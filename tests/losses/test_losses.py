"""InfoNCE and spectral loss against slow, obvious per-query references."""

from __future__ import annotations

import math

import pytest
import torch

from ncl_lightning.losses import (
    OBJECTIVES,
    InfoNCELoss,
    SpectralContrastiveLoss,
    info_nce,
    spectral_contrastive,
)


def _unit(v: torch.Tensor) -> torch.Tensor:
    """``v / ||v||``; a zero vector stays zero (its similarity to anything is 0)."""
    return v / v.norm() if v.norm() > 0 else v


def reference_info_nce(z1: torch.Tensor, z2: torch.Tensor, t: float) -> float:
    feats = [_unit(v) for v in torch.cat([z1, z2]).double()]
    n = z1.shape[0]
    total = 0.0
    for i, q in enumerate(feats):
        pos = i + n if i < n else i - n
        num = math.exp(float(q @ feats[pos]) / t)
        den = sum(math.exp(float(q @ k) / t) for j, k in enumerate(feats) if j != i)
        total += -math.log(num / den)
    return total / (2 * n)


def reference_spectral(z1: torch.Tensor, z2: torch.Tensor) -> float:
    feats = [_unit(v) for v in torch.cat([z1, z2]).double()]
    n = z1.shape[0]
    total = 0.0
    for i, q in enumerate(feats):
        pos = i + n if i < n else i - n
        negatives = [float(q @ k) ** 2 for j, k in enumerate(feats) if j not in (i, pos)]
        total += -2.0 * float(q @ feats[pos]) + sum(negatives) / len(negatives)
    return total / (2 * n)


@pytest.mark.parametrize(("n", "d"), [(2, 3), (5, 8), (16, 4)])
@pytest.mark.parametrize("temperature", [0.07, 0.2, 1.0])
def test_info_nce_matches_reference(n: int, d: int, temperature: float) -> None:
    g = torch.Generator().manual_seed(n * 100 + d)
    z1, z2 = torch.randn(n, d, generator=g), torch.randn(n, d, generator=g)
    got = info_nce(z1, z2, temperature, gather_distributed=False)
    assert got.item() == pytest.approx(reference_info_nce(z1, z2, temperature), rel=1e-5)


@pytest.mark.parametrize(("n", "d"), [(2, 3), (5, 8), (16, 4)])
def test_spectral_matches_reference(n: int, d: int) -> None:
    g = torch.Generator().manual_seed(7 * n + d)
    z1, z2 = torch.randn(n, d, generator=g), torch.randn(n, d, generator=g)
    got = spectral_contrastive(z1, z2, gather_distributed=False)
    assert got.item() == pytest.approx(reference_spectral(z1, z2), rel=1e-5, abs=1e-6)


def test_info_nce_is_scale_invariant_and_low_for_aligned_views() -> None:
    z = torch.eye(4)
    aligned = info_nce(z, z.clone(), 0.1, gather_distributed=False)
    shuffled = info_nce(z, z[[1, 2, 3, 0]], 0.1, gather_distributed=False)
    assert aligned < shuffled
    assert info_nce(3 * z, z, 0.1, False).item() == pytest.approx(aligned.item())


def test_losses_give_gradients_to_both_views() -> None:
    z1 = torch.randn(6, 5, requires_grad=True)
    z2 = torch.randn(6, 5, requires_grad=True)
    for loss in (InfoNCELoss(0.5, False), SpectralContrastiveLoss(False)):
        z1.grad = z2.grad = None
        loss(z1, z2).backward()
        assert z1.grad.abs().sum() > 0 and z2.grad.abs().sum() > 0


def test_bad_hyper_parameters_and_shapes() -> None:
    with pytest.raises(ValueError, match="temperature must be > 0"):
        InfoNCELoss(temperature=0.0)
    with pytest.raises(ValueError, match=r"z2 must have shape \[3, 4\], got \(2, 4\)"):
        info_nce(torch.randn(3, 4), torch.randn(2, 4), gather_distributed=False)
    valid = r"info_nce, info_nce_l1, spectral"
    with pytest.raises(ValueError, match=rf"unknown objective 'nce2'.*{valid}"):
        OBJECTIVES.build("nce2", temperature=0.2, gather_distributed=False)
