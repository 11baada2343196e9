"""SupCon against a slow per-anchor, per-positive reference; InfoNCE limit; 2-rank DDP."""

from __future__ import annotations

import math

import pytest
import torch

from ncl_lightning.losses import info_nce
from ncl_lightning.losses.supcon import SupConLoss, supcon
from tests.gloo_group import check_result, gloo_results
from tests.losses.ddp_supcon_worker import TEMPERATURE, make_labels
from tests.losses.ddp_worker import make_problem


def reference_supcon(z1: torch.Tensor, z2: torch.Tensor, labels: torch.Tensor, t: float) -> float:
    """Khosla et al. (2020), Eq. 2 (L_out), one anchor and one positive at a time."""
    feats = [v / v.norm() for v in torch.cat([z1, z2]).double()]
    ys = labels.tolist() * 2
    total = 0.0
    for a, za in enumerate(feats):
        den = sum(math.exp(float(za @ zk) / t) for k, zk in enumerate(feats) if k != a)
        positives = [p for p in range(len(feats)) if p != a and ys[p] == ys[a]]
        assert positives, "the other view is always a positive"
        anchor_loss = 0.0
        for p in positives:
            anchor_loss += -math.log(math.exp(float(za @ feats[p]) / t) / den)
        total += anchor_loss / len(positives)
    return total / len(feats)


@pytest.mark.parametrize(("n", "d", "classes"), [(2, 3, 1), (5, 8, 2), (16, 4, 3), (12, 6, 12)])
@pytest.mark.parametrize("temperature", [0.07, 0.2, 1.0])
def test_supcon_matches_reference(n: int, d: int, classes: int, temperature: float) -> None:
    g = torch.Generator().manual_seed(n * 100 + d + classes)
    z1, z2 = torch.randn(n, d, generator=g), torch.randn(n, d, generator=g)
    labels = torch.randint(0, classes, (n,), generator=g)
    got = supcon(z1, z2, labels, temperature, gather_distributed=False)
    expected = reference_supcon(z1, z2, labels, temperature)
    assert got.item() == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize("temperature", [0.1, 0.2, 0.5])
def test_all_distinct_labels_is_info_nce(temperature: float) -> None:
    g = torch.Generator().manual_seed(3)
    z1, z2 = torch.randn(10, 7, generator=g), torch.randn(10, 7, generator=g)
    labels = torch.randperm(10, generator=g) + 5
    torch.testing.assert_close(
        supcon(z1, z2, labels, temperature, gather_distributed=False),
        info_nce(z1, z2, temperature, gather_distributed=False),
    )


def test_same_class_samples_pull_together() -> None:
    """Repeated labels change the loss: features clustered by label score lower."""
    z = torch.eye(4).repeat_interleave(2, dim=0)  # samples 2k and 2k+1 share a direction
    by_cluster = torch.arange(4).repeat_interleave(2)
    across = torch.arange(4).repeat(2)
    assert supcon(z, z, by_cluster, 0.1, False) < supcon(z, z, across, 0.1, False)


def test_gradient_reaches_both_views() -> None:
    z1 = torch.randn(6, 5, requires_grad=True)
    z2 = torch.randn(6, 5, requires_grad=True)
    SupConLoss(0.5, gather_distributed=False)(z1, z2, torch.tensor([0, 1, 0, 2, 1, 0])).backward()
    assert torch.isfinite(z1.grad).all() and torch.isfinite(z2.grad).all()
    assert z1.grad.abs().sum() > 0 and z2.grad.abs().sum() > 0


def test_bad_temperature_and_shapes_are_clear_errors() -> None:
    for bad in (0.0, -0.1):
        with pytest.raises(ValueError, match="temperature must be > 0"):
            SupConLoss(temperature=bad)
    labels = torch.zeros(3, dtype=torch.long)
    with pytest.raises(ValueError, match=r"z2 must have shape \[3, 4\], got \(2, 4\)"):
        supcon(torch.randn(3, 4), torch.randn(2, 4), labels, gather_distributed=False)
    with pytest.raises(ValueError, match=r"labels must have shape \[3\], got \(2,\)"):
        supcon(torch.randn(3, 4), torch.randn(3, 4), labels[:2], gather_distributed=False)


@pytest.mark.ddp
@pytest.mark.xdist_group("gloo")
def test_two_rank_gloo_equals_single_process(tmp_path_factory) -> None:
    ranks = check_result(gloo_results(tmp_path_factory), "supcon")  # tests.gloo_group
    model, x1, x2 = make_problem()
    labels = make_labels(x1.shape[0])
    loss = SupConLoss(TEMPERATURE, gather_distributed=False)(model(x1), model(x2), labels)
    loss.backward()
    # guard: without the other rank's candidates the loss differs, so this test can fail
    halves = [
        supcon(model(x1[s]), model(x2[s]), labels[s], TEMPERATURE, gather_distributed=False)
        for s in (slice(0, 4), slice(4, 8))
    ]
    assert not torch.isclose(loss, torch.stack(halves).mean())
    for got in ranks:
        torch.testing.assert_close(got["loss"], loss.detach(), rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(got["weight"], model.weight.grad, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(got["bias"], model.bias.grad, rtol=1e-5, atol=1e-6)
