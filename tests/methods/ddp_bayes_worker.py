"""Check of BayesNCL in the 2-process gloo group (``tests.gloo_group``)."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from ncl_lightning.methods import BayesNCL


class FlatLinear(nn.Module):
    """A BatchNorm-free backbone ``[B, 1, 4, 4] -> [B, 8]``."""

    out_dim = 8

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(16, 8), nn.ReLU())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def make_problem(n_total: int = 8) -> tuple[BayesNCL, torch.Tensor, torch.Tensor]:
    """A fixed BayesNCL (STE gate, large KL weight so the term matters) and two views.

    BatchNorm layers of the heads use running statistics (eval mode) so that a sample's
    features do not depend on which rank's batch it is in; the gate stays in train mode.
    """
    torch.manual_seed(0)
    model = BayesNCL(FlatLinear(), proj_hidden_dim=16, proj_output_dim=6, kl_weight=0.1,
                     prior=0.5, num_classes=0)  # fmt: skip
    for m in model.modules():
        if isinstance(m, nn.BatchNorm1d):
            m.eval()
    g = torch.Generator().manual_seed(1)
    return (
        model,
        torch.randn(n_total, 1, 4, 4, generator=g),
        torch.randn(n_total, 1, 4, 4, generator=g),
    )


def gated_loss(model: BayesNCL, x1: torch.Tensor, x2: torch.Tensor, encode) -> torch.Tensor:
    """BayesNCL's objective on two views encoded by ``encode`` (the DDP wrapper or the model)."""
    views = [encode(x1), encode(x2)]
    return model.objective(views)


def rank_result(rank: int, world: int) -> dict:
    """In the running group, this rank's half of the batch under DDP: the mean loss and
    every gradient."""
    model, x1, x2 = make_problem()
    ddp = DistributedDataParallel(model)
    n = x1.shape[0] // world
    sl = slice(rank * n, (rank + 1) * n)
    loss = gated_loss(model, x1[sl], x2[sl], ddp)
    loss.backward()
    mean = loss.detach().clone()
    dist.all_reduce(mean)
    grads = {k: p.grad for k, p in model.named_parameters() if p.grad is not None}
    return {"loss": mean / world, "grads": grads}
