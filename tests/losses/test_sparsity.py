"""InfoNCE + L1 sparsity penalty (NCL paper Table 5): against a slow reference written here."""

from __future__ import annotations

import math

import pytest
import torch

from ncl_lightning.losses import OBJECTIVES, InfoNCEL1Loss, info_nce, info_nce_l1, l1_penalty
from ncl_lightning.losses.sparsity import L1_WEIGHT
from tests.losses.test_losses import reference_info_nce


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
