"""Spawning real gloo process groups for the DDP tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch.multiprocessing as mp


def spawn_ranks(
    target: Callable[..., None], tmp: Path | str, world: int = 2, *args: object
) -> None:
    """Run ``target(rank, world, init_file, out_file, *args)`` in ``world`` spawned processes
    (``out_file`` = ``<tmp>/out<rank>.pt``) and fail if any rank fails."""
    ctx = mp.get_context("spawn")
    procs = [
        ctx.Process(target=target, args=(r, world, f"{tmp}/init", f"{tmp}/out{r}.pt", *args))
        for r in range(world)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0, f"rank process failed with exit code {p.exitcode}"
