"""Negative-cosine (SimSiam/BYOL) loss against a loop reference; stop-gradient."""

from __future__ import annotations

import math

import pytest
import torch

from ncl_lightning.losses import negative_cosine, symmetric_negative_cosine


def _reference(p: torch.Tensor, z: torch.Tensor) -> float:
    total = 0.0
    for a, b in zip(p.tolist(), z.tolist(), strict=True):
        dot = sum(x * y for x, y in zip(a, b, strict=True))
        total -= dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))
    return total / len(p)


def test_matches_loop_reference_and_symmetrises() -> None:
    g = torch.Generator().manual_seed(0)
    p1, p2, z1, z2 = (torch.randn(6, 4, generator=g) for _ in range(4))
    assert negative_cosine(p1, z2).item() == pytest.approx(_reference(p1, z2), abs=1e-6)
    expected = 0.5 * (_reference(p1, z2) + _reference(p2, z1))
    assert symmetric_negative_cosine(p1, p2, z1, z2).item() == pytest.approx(expected, abs=1e-6)
    assert negative_cosine(z1, z1).item() == pytest.approx(-1.0)
    assert negative_cosine(z1, -z1).item() == pytest.approx(1.0)


def test_no_gradient_reaches_the_target() -> None:
    p = torch.randn(5, 3, requires_grad=True)
    z = torch.randn(5, 3, requires_grad=True)
    negative_cosine(p, z).backward()
    assert p.grad is not None and p.grad.abs().sum() > 0
    assert z.grad is None


def test_shape_mismatch_is_reported() -> None:
    with pytest.raises(ValueError, match=r"z must have shape \[4, 3\], got \(4, 2\)"):
        negative_cosine(torch.randn(4, 3), torch.randn(4, 2))
