"""The spectral loss's normalisations (``ball``: HaoChen et al.'s release, ``sphere``, ``none``)
against a slow reference written here, one row and one pair at a time."""

from __future__ import annotations

import math

import pytest
import torch

from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.losses import (
    OBJECTIVES,
    SPECTRAL_NORMALIZATIONS,
    SpectralContrastiveLoss,
    spectral_contrastive,
)
from tests.losses.test_losses import reference_spectral

NORMALIZATIONS = ("ball", "sphere", "none")


def reference_rescale(row: list[float], normalize: str, mu: float) -> list[float]:
    """One row as the loss compares it, written out as HaoChen et al.'s release states it:
    a row whose norm is below ``√μ`` is kept, a longer one becomes ``√μ z / ‖z‖``."""
    norm = math.sqrt(sum(v * v for v in row))
    if normalize == "none" or (normalize == "ball" and norm < math.sqrt(mu)):
        return list(row)
    if norm == 0:
        return [0.0] * len(row)
    return [math.sqrt(mu) * v / norm for v in row]


def reference_spectral_loss(z1: torch.Tensor, z2: torch.Tensor, normalize: str, mu: float) -> float:
    """``(1/2n) Σ_q [-2 f_q·f_q⁺ + mean_{k ∉ {q, q⁺}} (f_q·f_k)²] / μ`` by Python loops."""
    rows = [reference_rescale(r, normalize, mu) for r in [*z1.tolist(), *z2.tolist()]]
    n = z1.shape[0]

    def dot(a: list[float], b: list[float]) -> float:
        return sum(x * y for x, y in zip(a, b, strict=True))

    total = 0.0
    for i, q in enumerate(rows):
        pos = i + n if i < n else i - n
        negatives = [dot(q, k) ** 2 for j, k in enumerate(rows) if j not in (i, pos)]
        total += -2.0 * dot(q, rows[pos]) + sum(negatives) / len(negatives)
    return total / (2 * n) / mu


def mixed_views(seed: int, n: int = 6, d: int = 5) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of mixed length (0.05 to 3 times a unit row), so some fall inside the ball."""
    gen = torch.Generator().manual_seed(seed)
    z1, z2 = torch.randn(n, d, generator=gen), torch.randn(n, d, generator=gen)
    scale = torch.linspace(0.05, 3.0, n)[:, None] / math.sqrt(d)
    return z1 * scale, z2 * scale.flip(0)


@pytest.mark.parametrize(
    ("normalize", "mu"),
    [("ball", 1.0), ("ball", 0.5), ("ball", 4.0), ("sphere", 1.0), ("sphere", 4.0), ("none", 1.0)],
)
def test_matches_the_slow_reference(normalize: str, mu: float) -> None:
    z1, z2 = mixed_views(seed=int(mu * 10))
    got = spectral_contrastive(z1, z2, False, normalize, mu)
    expected = reference_spectral_loss(z1, z2, normalize, mu)
    assert got.item() == pytest.approx(expected, rel=1e-5, abs=1e-6)


def test_sphere_at_mu_one_is_the_loss_before_the_option() -> None:
    z1, z2 = mixed_views(seed=3)
    assert spectral_contrastive(z1, z2, gather_distributed=False).item() == pytest.approx(
        reference_spectral(z1, z2), rel=1e-5, abs=1e-6
    )
    by_name = OBJECTIVES.build("spectral", temperature=0.2, gather_distributed=False)
    assert isinstance(by_name, SpectralContrastiveLoss) and by_name.normalize == "sphere"


def test_ball_is_the_sphere_outside_and_the_raw_features_inside() -> None:
    z1, z2 = mixed_views(seed=4)
    unit = torch.nn.functional.normalize
    long1, long2 = 5 * unit(z1, dim=1), 5 * unit(z2, dim=1)  # every row beyond √μ = 1
    short1, short2 = 0.2 * unit(z1, dim=1), 0.3 * unit(z2, dim=1)  # every row inside
    ball = spectral_contrastive(long1, long2, False, "ball")
    assert ball.item() == pytest.approx(spectral_contrastive(long1, long2, False).item())
    assert spectral_contrastive(short1, short2, False, "ball").item() == pytest.approx(
        spectral_contrastive(short1, short2, False, "none").item()
    )
    # outside the ball the loss does not see the length; inside it does
    assert spectral_contrastive(3 * long1, long2, False, "ball").item() == pytest.approx(
        ball.item()
    )
    inside = spectral_contrastive(short1, short2, False, "ball")
    assert abs(spectral_contrastive(2 * short1, short2, False, "ball") - inside) > 1e-3


def test_mu_weighs_the_negative_term_on_the_sphere() -> None:
    # on the sphere of radius √μ, divided by μ: -2 mean cos⁺ + μ · mean cos²
    z1, z2 = mixed_views(seed=5)
    unit = torch.nn.functional.normalize
    positive = (unit(z1, dim=1) * unit(z2, dim=1)).sum(dim=1).mean().item()
    one = spectral_contrastive(z1, z2, False, "sphere", 1.0).item()
    four = spectral_contrastive(z1, z2, False, "sphere", 4.0).item()
    negative = one + 2.0 * positive
    assert negative > 0.01
    assert four == pytest.approx(-2.0 * positive + 4.0 * negative, rel=1e-5, abs=1e-6)


@pytest.mark.parametrize("normalize", NORMALIZATIONS)
def test_gradients_are_finite_with_zero_and_long_rows(normalize: str) -> None:
    z1, z2 = mixed_views(seed=6)
    z1[0] = 0.0  # a dead row (an NCL feature with every entry rectified)
    z2[1] = 1e4  # a row far outside the ball
    z1.requires_grad_(True)
    z2.requires_grad_(True)
    SpectralContrastiveLoss(gather_distributed=False, normalize=normalize)(z1, z2).backward()
    for grad in (z1.grad, z2.grad):
        assert grad is not None and torch.isfinite(grad).all()
        assert grad.abs().sum() > 0
    # on the ball, a row far outside gets a gradient shrunk by its length (scale-free)
    if normalize == "ball":
        assert z2.grad[1].norm() < 1e-3 * z2.grad[2:].norm(dim=1).max()


def test_aligned_decorrelatedmixed_views_score_lower() -> None:
    z = torch.eye(6)
    for normalize in NORMALIZATIONS:
        aligned = spectral_contrastive(z, z.clone(), False, normalize)
        shuffled = spectral_contrastive(z, z[[1, 2, 3, 4, 5, 0]], False, normalize)
        assert aligned < shuffled - 1.0


def test_registry_and_checks() -> None:
    assert SPECTRAL_NORMALIZATIONS.names == ["ball", "none", "sphere"]
    with pytest.raises(ConfigError, match=r"normalize: unknown spectral normalisation 'unit'"):
        SpectralContrastiveLoss(normalize="unit")
    with pytest.raises(ConfigError, match=r"mu must be > 0, got 0\.0"):
        SpectralContrastiveLoss(mu=0.0)
    with pytest.raises(ConfigError, match="mu must be > 0"):
        SpectralContrastiveLoss(normalize="ball", mu=float("nan"))
    with pytest.raises(ConfigError, match=r"mu=2\.0 does nothing with normalize: none") as info:
        SpectralContrastiveLoss(normalize="none", mu=2.0)
    assert info.value.key == "mu"
    loss = SpectralContrastiveLoss(gather_distributed=False, normalize="BALL", mu=1.0)
    z1, z2 = mixed_views(seed=7)
    assert torch.equal(loss(z1, z2), spectral_contrastive(z1, z2, False, "ball", 1.0))
