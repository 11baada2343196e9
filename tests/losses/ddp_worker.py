"""Checks of the 2-process gloo group (``tests.gloo_group``) on a shared linear problem."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from ncl_lightning.losses import OBJECTIVES, SpectralContrastiveLoss, SpectralL1Loss

# Losses by test name, built with or without gathering negatives from every rank. The ball
# radius sqrt(16) = 4 lies inside the range of make_problem's row norms (1.8-9.6), so the
# clamp scales some rows and leaves others raw.
LOSSES: dict[str, Callable[[bool], torch.nn.Module]] = {
    "info_nce": lambda g: OBJECTIVES.build("info_nce", temperature=0.3, gather_distributed=g),
    "spectral": lambda g: OBJECTIVES.build("spectral", temperature=0.3, gather_distributed=g),
    "spectral_ball": lambda g: SpectralContrastiveLoss(g, normalize="ball", mu=16.0),
    "spectral_l1_ball": lambda g: SpectralL1Loss(
        l1_weight=0.05, normalize="ball", mu=16.0, gather_distributed=g
    ),
}


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
    """The loss ``LOSSES[objective]`` (gathering on) on this rank's half."""

    def loss_of(ddp, x1, x2, rows):
        return LOSSES[objective](True)(ddp(x1[rows]), ddp(x2[rows]))

    return loss_result(rank, world, loss_of)
