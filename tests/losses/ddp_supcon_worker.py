"""Worker of the 2-process gloo SupCon test (importable by spawned children)."""

from __future__ import annotations

import torch

from ncl_lightning.losses.supcon import SupConLoss
from tests.losses.ddp_worker import run_loss_rank

TEMPERATURE = 0.3


def make_labels(n_total: int = 8) -> torch.Tensor:
    """Repeated labels whose classes span both ranks' halves of the batch."""
    return torch.tensor([0, 1, 2, 0, 1, 1, 3, 2])[:n_total]


def run_rank(rank: int, world: int, init_file: str, out_file: str) -> None:
    """SupCon on this rank's half of the batch under DDP; save the mean loss and gradients."""

    def loss_of(ddp, x1, x2, rows):
        labels = make_labels(x1.shape[0])
        loss_fn = SupConLoss(TEMPERATURE, gather_distributed=True)
        return loss_fn(ddp(x1[rows]), ddp(x2[rows]), labels[rows])

    run_loss_rank(rank, world, init_file, out_file, loss_of)
