"""Real 2-process gloo DDP: every metric equals one process on all the data."""

from __future__ import annotations

import pytest
import torch
import torch.multiprocessing as mp

from tests.metrics.ddp_metrics_worker import (
    RANK_SLICES,
    make_data,
    make_metrics,
    results,
    run_rank,
    update_all,
)

WORLD = len(RANK_SLICES)


def _spawn(tmp: str) -> None:
    ctx = mp.get_context("spawn")
    procs = []
    for rank in range(WORLD):
        p = ctx.Process(target=run_rank, args=(rank, WORLD, f"{tmp}/init", f"{tmp}/out{rank}.pt"))
        p.start()
        procs.append(p)
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0, f"rank process failed with exit code {p.exitcode}"


@pytest.mark.ddp
def test_two_rank_gloo_metrics_equal_single_process(tmp_path) -> None:
    _spawn(str(tmp_path))
    z, labels = make_data()
    metrics = make_metrics()
    update_all(metrics, z, labels)
    expected = results(metrics)
    # Guard: a rank alone must differ, so the comparison can fail without syncing.
    local = make_metrics()
    update_all(local, z[RANK_SLICES[0]], labels[RANK_SLICES[0]])
    assert not torch.isclose(local["consistency"].compute(), expected["consistency"])
    for rank in range(WORLD):
        got = torch.load(tmp_path / f"out{rank}.pt", weights_only=True)
        assert got.keys() == expected.keys()
        for name, value in expected.items():
            torch.testing.assert_close(
                got[name], value, rtol=1e-5, atol=1e-6, equal_nan=True,
                msg=lambda m, n=name: f"{n}: {m}",
            )
