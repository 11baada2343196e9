"""Contrastive losses at the zero feature vector: the forward pass is ``F.normalize``'s, the
gradient of a zero row is zero (not ``1 / eps`` times the upstream one), and every other
row's gradient is unchanged (BayesNCL's gated features reach the zero vector; issue 17)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from ncl_lightning.losses import info_nce, spectral_contrastive, supcon
from ncl_lightning.losses.pairs import normalize_rows
from tests.losses.test_losses import reference_info_nce


def _features(n: int = 6, d: int = 5, zero_rows: tuple[int, ...] = (1, 4)) -> torch.Tensor:
    g = torch.Generator().manual_seed(11)
    z = torch.randn(n, d, generator=g).relu()
    z[list(zero_rows)] = 0.0
    return z


def test_forward_is_exactly_f_normalize() -> None:
    z = _features()
    z[2] = 1e-14  # below eps: divided by eps, as F.normalize does
    assert torch.equal(normalize_rows(z), F.normalize(z, dim=1))


def test_gradient_of_live_rows_is_unchanged_and_zero_rows_get_none() -> None:
    z = _features()
    weights = torch.randn(z.shape, generator=torch.Generator().manual_seed(3))
    ours = z.clone().requires_grad_()
    (normalize_rows(ours) * weights).sum().backward()
    theirs = z.clone().requires_grad_()
    (F.normalize(theirs, dim=1) * weights).sum().backward()
    live = z.norm(dim=1) > 0
    assert torch.equal(ours.grad[live], theirs.grad[live])
    assert not ours.grad[~live].any()
    assert theirs.grad[~live].abs().max() > 1e10  # what F.normalize gave: 1 / eps


@pytest.mark.parametrize("temperature", [0.1, 0.5])
def test_info_nce_with_zero_rows_matches_reference_with_bounded_gradient(
    temperature: float,
) -> None:
    z1, z2 = _features(zero_rows=(1,)), _features(zero_rows=(0, 4)) + 0.0
    z2 = z2.flip(0).contiguous()
    a, b = z1.clone().requires_grad_(), z2.clone().requires_grad_()
    loss = info_nce(a, b, temperature, gather_distributed=False)
    expected = reference_info_nce(z1, z2, temperature)
    assert loss.item() == pytest.approx(expected, rel=1e-5)
    loss.backward()
    for grad in (a.grad, b.grad):
        assert torch.isfinite(grad).all() and grad.abs().max() < 100.0


def test_spectral_and_supcon_give_bounded_gradients_at_zero_rows() -> None:
    z1, z2 = _features(zero_rows=(2,)), _features(zero_rows=(3,))
    labels = torch.tensor([0, 1, 0, 1, 2, 2])
    for loss_fn in (
        lambda a, b: spectral_contrastive(a, b, gather_distributed=False),
        lambda a, b: supcon(a, b, labels, 0.2, gather_distributed=False),
    ):
        a, b = z1.clone().requires_grad_(), z2.clone().requires_grad_()
        loss = loss_fn(a, b)
        loss.backward()
        assert torch.isfinite(loss)
        assert a.grad.abs().max() < 100.0 and b.grad.abs().max() < 100.0
