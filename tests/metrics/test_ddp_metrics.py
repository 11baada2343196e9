"""Real 2-process gloo DDP: every metric equals one process on all the data (the check runs
in the shared gloo group, ``tests.gloo_group``)."""

from __future__ import annotations

import pytest
import torch

from tests.gloo_group import WORLD, check_result, gloo_results
from tests.metrics.ddp_metrics_worker import (
    RANK_SLICES,
    make_data,
    make_metrics,
    results,
    update_all,
)


@pytest.mark.ddp
@pytest.mark.xdist_group("gloo")
def test_two_rank_gloo_metrics_equal_single_process(tmp_path_factory) -> None:
    assert len(RANK_SLICES) == WORLD
    ranks = check_result(gloo_results(tmp_path_factory), "metrics")
    z, labels = make_data()
    metrics = make_metrics()
    update_all(metrics, z, labels)
    expected = results(metrics)
    # Guard: a rank alone must differ, so the comparison can fail without syncing.
    local = make_metrics()
    update_all(local, z[RANK_SLICES[0]], labels[RANK_SLICES[0]])
    assert not torch.isclose(local["consistency"].compute(), expected["consistency"])
    for got in ranks:
        assert got.keys() == expected.keys()
        for name, value in expected.items():
            torch.testing.assert_close(
                got[name],
                value,
                rtol=1e-5,
                atol=1e-6,
                equal_nan=True,
                msg=lambda m, n=name: f"{n}: {m}",
            )
