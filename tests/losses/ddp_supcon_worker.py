"""Check of SupCon in the 2-process gloo group (``tests.gloo_group``)."""

from __future__ import annotations

import torch

from ncl_lightning.losses.supcon import SupConLoss
from tests.losses.ddp_worker import loss_result

TEMPERATURE = 0.3


def make_labels(n_total: int = 8) -> torch.Tensor:
    """Repeated labels whose classes span both ranks' halves of the batch."""
    return torch.tensor([0, 1, 2, 0, 1, 1, 3, 2])[:n_total]


def rank_result(rank: int, world: int) -> dict:
    """SupCon on this rank's half of the batch under DDP: the mean loss and gradients."""

    def loss_of(ddp, x1, x2, rows):
        labels = make_labels(x1.shape[0])
        loss_fn = SupConLoss(TEMPERATURE, gather_distributed=True)
        return loss_fn(ddp(x1[rows]), ddp(x2[rows]), labels[rows])

    return loss_result(rank, world, loss_of)
