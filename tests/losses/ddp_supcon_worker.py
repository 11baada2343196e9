"""Worker of the 2-process gloo SupCon test (importable by spawned children)."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from ncl_lightning.losses.supcon import SupConLoss
from tests.losses.ddp_worker import make_problem

TEMPERATURE = 0.3


def make_labels(n_total: int = 8) -> torch.Tensor:
    """Repeated labels whose classes span both ranks' halves of the batch."""
    return torch.tensor([0, 1, 2, 0, 1, 1, 3, 2])[:n_total]


def run_rank(rank: int, world: int, init_file: str, out_file: str) -> None:
    """SupCon on this rank's half of the batch under DDP; save the mean loss and gradients."""
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        model, x1, x2 = make_problem()
        labels = make_labels(x1.shape[0])
        ddp = DistributedDataParallel(model)
        n = x1.shape[0] // world
        sl = slice(rank * n, (rank + 1) * n)
        loss_fn = SupConLoss(TEMPERATURE, gather_distributed=True)
        loss = loss_fn(ddp(x1[sl]), ddp(x2[sl]), labels[sl])
        loss.backward()
        mean_loss = loss.detach().clone()
        dist.all_reduce(mean_loss)
        mean_loss /= world
        torch.save(
            {"loss": mean_loss, "weight": model.weight.grad, "bias": model.bias.grad}, out_file
        )
    finally:
        dist.destroy_process_group()
