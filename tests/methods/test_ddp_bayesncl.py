"""Real 2-process gloo DDP: BayesNCL's loss and every gradient equal one process."""

from __future__ import annotations

import pytest
import torch

from tests.ddp import spawn_ranks
from tests.methods.ddp_bayes_worker import gated_loss, make_problem, run_rank


@pytest.mark.ddp
def test_bayesncl_two_ranks_equal_one_process(tmp_path) -> None:
    spawn_ranks(run_rank, tmp_path, 2)
    model, x1, x2 = make_problem()
    loss = gated_loss(model, x1, x2, model)
    loss.backward()
    expected = {k: p.grad for k, p in model.named_parameters() if p.grad is not None}
    assert any(k.startswith("gating_head") for k in expected)
    for r in range(2):
        got = torch.load(tmp_path / f"out{r}.pt", weights_only=True)
        torch.testing.assert_close(got["loss"], loss.detach(), rtol=1e-5, atol=1e-6)
        assert set(got["grads"]) == set(expected)
        for k, g in expected.items():
            torch.testing.assert_close(got["grads"][k], g, rtol=1e-4, atol=1e-6, msg=k)
