"""One spawned 2-rank gloo group for every raw-collective DDP check of the tests.

A spawned rank pays the imports of Python, torch and the package (most of its run time on
a small CPU), so the checks of ``tests/losses/test_ddp_losses.py``, ``test_supcon.py``,
``tests/methods/test_ddp_bayesncl.py``, ``tests/evaluation/test_ddp_bank.py`` and
``tests/metrics/test_ddp_metrics.py`` run one after the other in the same group, once per
pytest process (:func:`gloo_results`), and each test compares its own entry with one
process. A check that raises is recorded with its traceback (the other checks still run)
and fails only its test; a rank left waiting on a collective fails after a minute.
Tests using it carry ``pytest.mark.xdist_group("gloo")`` so that ``-n 2 --dist loadgroup``
spawns the group once.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WORLD = 2


def _checks() -> dict[str, Callable[[int, int], dict[str, Any]]]:
    """Every check: ``name -> check(rank, world)`` returning what that rank saw."""
    from tests.evaluation import ddp_bank_worker
    from tests.losses import ddp_pairs_worker, ddp_supcon_worker, ddp_worker
    from tests.methods import ddp_bayes_worker
    from tests.metrics import ddp_metrics_worker

    return {
        **{
            name: (lambda r, w, name=name: ddp_worker.objective_result(r, w, name))
            for name in ddp_worker.LOSSES
        },
        "pairs": ddp_pairs_worker.rank_result,
        "supcon": ddp_supcon_worker.rank_result,
        "bayesncl": ddp_bayes_worker.rank_result,
        "bank": ddp_bank_worker.rank_result,
        "metrics": ddp_metrics_worker.rank_result,
    }


def run_rank(rank: int, world: int, init_file: str, out_file: str) -> None:
    """Join the group, run every check, save ``{name: result or {"error": traceback}}``."""
    dist.init_process_group(
        "gloo", init_method=f"file://{init_file}", rank=rank, world_size=world,
        timeout=timedelta(seconds=60),
    )  # fmt: skip
    try:
        results: dict[str, Any] = {}
        for name, check in _checks().items():
            try:
                results[name] = check(rank, world)
            except Exception:
                results[name] = {"error": traceback.format_exc()}
        torch.save(results, out_file)
        # Both ranks done with every collective before the group goes: a rank that tore
        # the group down while the other's gloo work was in flight once aborted.
        dist.barrier()
    finally:
        dist.destroy_process_group()


def spawn(target: Callable[..., None], args: list[tuple], timeout: float = 300) -> None:
    """One spawned process per entry of ``args`` running ``target(*entry)``; waits up to
    ``timeout`` s for each, kills any still running and fails unless all exited with 0."""
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=target, args=entry) for entry in args]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=timeout)
    codes = [p.exitcode for p in procs]
    for p in procs:
        if p.exitcode is None:
            p.kill()
    assert codes == [0] * len(procs), f"rank exit codes {codes}"


_RESULTS: list[dict[str, Any]] = []


def gloo_results(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """Every rank's results (index = rank), the group spawned on the first call."""
    if not _RESULTS:
        tmp = tmp_path_factory.mktemp("gloo")
        spawn(run_rank, [(r, WORLD, f"{tmp}/init", f"{tmp}/out{r}.pt") for r in range(WORLD)])
        _RESULTS.extend(
            torch.load(Path(tmp) / f"out{r}.pt", weights_only=True) for r in range(WORLD)
        )
    return _RESULTS


def check_result(results: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    """The per-rank results of check ``name``; fail with a rank's traceback if it raised."""
    per_rank = [r[name] for r in results]
    for rank, got in enumerate(per_rank):
        assert "error" not in got, f"rank {rank}, check {name}:\n{got.get('error')}"
    return per_rank
