"""Real 2-process gloo DDP: BayesNCL's loss and every gradient equal one process (the check
runs in the shared gloo group, ``tests.gloo_group``)."""

from __future__ import annotations

import pytest
import torch

from tests.gloo_group import check_result, gloo_results
from tests.methods.ddp_bayes_worker import gated_loss, make_problem


@pytest.mark.ddp
@pytest.mark.xdist_group("gloo")
def test_bayesncl_two_ranks_equal_one_process(tmp_path_factory) -> None:
    ranks = check_result(gloo_results(tmp_path_factory), "bayesncl")
    model, x1, x2 = make_problem()
    loss = gated_loss(model, x1, x2, model)
    loss.backward()
    expected = {k: p.grad for k, p in model.named_parameters() if p.grad is not None}
    assert any(k.startswith("gating_head") for k in expected)
    for got in ranks:
        torch.testing.assert_close(got["loss"], loss.detach(), rtol=1e-5, atol=1e-6)
        assert set(got["grads"]) == set(expected)
        for k, g in expected.items():
            torch.testing.assert_close(got["grads"][k], g, rtol=1e-4, atol=1e-6, msg=k)
