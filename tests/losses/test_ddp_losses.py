"""Real 2-process gloo DDP: loss and gradients equal one process on the whole batch, and
``view_pairs`` lays out each rank's queries and keys as the reference does."""

from __future__ import annotations

import pytest
import torch

from ncl_lightning.losses import OBJECTIVES
from tests.ddp import spawn_ranks
from tests.losses import ddp_pairs_worker
from tests.losses.ddp_worker import make_problem, run_rank
from tests.losses.test_pairs import check_against_reference

WORLD = 2


@pytest.mark.ddp
@pytest.mark.parametrize("objective", ["info_nce", "spectral"])
def test_two_rank_gloo_equals_single_process(objective: str, tmp_path) -> None:
    spawn_ranks(run_rank, tmp_path, WORLD, objective)
    model, x1, x2 = make_problem()
    loss = OBJECTIVES.build(objective, temperature=0.3, gather_distributed=False)(
        model(x1), model(x2)
    )
    loss.backward()
    for r in range(WORLD):
        got = torch.load(tmp_path / f"out{r}.pt", weights_only=True)
        torch.testing.assert_close(got["loss"], loss.detach(), rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(got["weight"], model.weight.grad, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(got["bias"], model.bias.grad, rtol=1e-5, atol=1e-6)


@pytest.mark.ddp
def test_without_gathering_ranks_see_only_local_negatives(tmp_path) -> None:
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
def test_two_rank_gloo_layout_and_gradient(tmp_path) -> None:
    """Each rank's layout is the reference on the global batch; the keys carry gradient
    back to the rank that made them (``keys.sum()`` on both ranks: 2 per local entry)."""
    world = WORLD
    spawn_ranks(ddp_pairs_worker.run_rank, tmp_path, world)
    _, x1, x2 = make_problem()
    labels = ddp_pairs_worker.make_labels(x1.shape[0])
    for rank in range(world):
        got = torch.load(tmp_path / f"out{rank}.pt", weights_only=True)
        check_against_reference(got, x1, x2, labels, world, rank)
        for grad in (got["grad1"], got["grad2"]):
            torch.testing.assert_close(grad, torch.full_like(grad, float(world)))
