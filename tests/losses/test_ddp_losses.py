"""Real 2-process gloo DDP: loss and gradients equal one process on the whole batch, and
``view_pairs`` lays out each rank's queries and keys as the reference does (the checks run
in the shared gloo group, ``tests.gloo_group``)."""

from __future__ import annotations

import pytest
import torch

from ncl_lightning.losses import OBJECTIVES
from tests.gloo_group import WORLD, check_result, gloo_results
from tests.losses import ddp_pairs_worker
from tests.losses.ddp_worker import LOSSES, make_problem
from tests.losses.test_pairs import check_against_reference


@pytest.mark.ddp
@pytest.mark.xdist_group("gloo")
@pytest.mark.parametrize("objective", list(LOSSES))
def test_two_rank_gloo_equals_single_process(objective: str, tmp_path_factory) -> None:
    """InfoNCE, the spectral loss on the sphere and in HaoChen et al.'s ball (rows both
    inside and outside it), and the ball with Table 5's L1 penalty."""
    ranks = check_result(gloo_results(tmp_path_factory), objective)
    model, x1, x2 = make_problem()
    loss = LOSSES[objective](False)(model(x1), model(x2))
    loss.backward()
    for got in ranks:
        torch.testing.assert_close(got["loss"], loss.detach(), rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(got["weight"], model.weight.grad, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(got["bias"], model.bias.grad, rtol=1e-5, atol=1e-6)


def test_without_gathering_ranks_see_only_local_negatives() -> None:
    """Guards the test above: it must be able to fail when negatives are not shared."""
    model, x1, x2 = make_problem()
    full = OBJECTIVES.build("info_nce", temperature=0.3, gather_distributed=False)(
        model(x1), model(x2)
    )
    halves = [
        OBJECTIVES.build("info_nce", temperature=0.3, gather_distributed=False)(
            model(x1[s]), model(x2[s])
        )
        for s in (slice(0, 4), slice(4, 8))
    ]
    assert not torch.isclose(full, torch.stack(halves).mean())


@pytest.mark.ddp
@pytest.mark.xdist_group("gloo")
def test_two_rank_gloo_layout_and_gradient(tmp_path_factory) -> None:
    """Each rank's layout is the reference on the global batch; the keys carry gradient
    back to the rank that made them (``keys.sum()`` on both ranks: 2 per local entry)."""
    ranks = check_result(gloo_results(tmp_path_factory), "pairs")
    _, x1, x2 = make_problem()
    labels = ddp_pairs_worker.make_labels(x1.shape[0])
    for rank, got in enumerate(ranks):
        check_against_reference(got, x1, x2, labels, WORLD, rank)
        for grad in (got["grad1"], got["grad2"]):
            torch.testing.assert_close(grad, torch.full_like(grad, float(WORLD)))
