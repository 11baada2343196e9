"""Worker run by the 2-process gloo tests (importable by spawned children)."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from ncl_lightning.losses import OBJECTIVES


def make_problem(n_total: int = 8, in_dim: int = 6, out_dim: int = 5) -> tuple:
    """A fixed linear encoder and two views of a global batch."""
    g = torch.Generator().manual_seed(0)
    x1, x2 = torch.randn(n_total, in_dim, generator=g), torch.randn(n_total, in_dim, generator=g)
    model = torch.nn.Linear(in_dim, out_dim)
    with torch.no_grad():
        model.weight.copy_(torch.randn(out_dim, in_dim, generator=g))
        model.bias.copy_(torch.randn(out_dim, generator=g))
    return model, x1, x2


def run_loss_rank(
    rank: int, world: int, init_file: str, out_file: str, loss_of: Callable[..., torch.Tensor]
) -> None:
    """Under DDP, ``loss_of(ddp_model, x1, x2, rows)`` on this rank's half of the batch;
    save the rank-averaged loss and the gradients."""
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        model, x1, x2 = make_problem()
        ddp = DistributedDataParallel(model)
        n = x1.shape[0] // world
        loss = loss_of(ddp, x1, x2, slice(rank * n, (rank + 1) * n))
        loss.backward()
        mean_loss = loss.detach().clone()
        dist.all_reduce(mean_loss)
        mean_loss /= world
        torch.save(
            {"loss": mean_loss, "weight": model.weight.grad, "bias": model.bias.grad}, out_file
        )
    finally:
        dist.destroy_process_group()


def run_rank(rank: int, world: int, init_file: str, out_file: str, objective: str) -> None:
    """A registered objective (temperature 0.3, gathering on) on this rank's half."""

    def loss_of(ddp, x1, x2, rows):
        loss_fn = OBJECTIVES.build(objective, temperature=0.3, gather_distributed=True)
        return loss_fn(ddp(x1[rows]), ddp(x2[rows]))

    run_loss_rank(rank, world, init_file, out_file, loss_of)
