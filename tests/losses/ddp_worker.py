"""Checks of the 2-process gloo group (``tests.gloo_group``) on a shared linear problem."""

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


def loss_result(rank: int, world: int, loss_of: Callable[..., torch.Tensor]) -> dict:
    """In the running group, ``loss_of(ddp_model, x1, x2, rows)`` on this rank's half of the
    batch under DDP; return the rank-averaged loss and the gradients."""
    model, x1, x2 = make_problem()
    ddp = DistributedDataParallel(model)
    n = x1.shape[0] // world
    loss = loss_of(ddp, x1, x2, slice(rank * n, (rank + 1) * n))
    loss.backward()
    mean_loss = loss.detach().clone()
    dist.all_reduce(mean_loss)
    mean_loss /= world
    return {"loss": mean_loss, "weight": model.weight.grad, "bias": model.bias.grad}


def objective_result(rank: int, world: int, objective: str) -> dict:
    """A registered objective (temperature 0.3, gathering on) on this rank's half."""

    def loss_of(ddp, x1, x2, rows):
        loss_fn = OBJECTIVES.build(objective, temperature=0.3, gather_distributed=True)
        return loss_fn(ddp(x1[rows]), ddp(x2[rows]))

    return loss_result(rank, world, loss_of)
