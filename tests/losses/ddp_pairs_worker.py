"""Check of ``view_pairs`` in the 2-process gloo group (``tests.gloo_group``)."""

from __future__ import annotations

import torch

from ncl_lightning.losses import view_pairs
from tests.losses.ddp_worker import make_problem


def make_labels(n_total: int) -> torch.Tensor:
    """Labels shared across the two ranks' halves of the batch."""
    return torch.arange(n_total) % 3


def rank_result(rank: int, world: int) -> dict:
    """In the running group, ``view_pairs`` of this rank's half (gathering on): its layout,
    masks, the label mask and the gradient that ``keys.sum()`` sends back to the views."""
    _, x1, x2 = make_problem()
    n = x1.shape[0] // world
    rows = slice(rank * n, (rank + 1) * n)
    z1, z2 = x1[rows].clone().requires_grad_(), x2[rows].clone().requires_grad_()
    pairs = view_pairs(z1, z2, gather_distributed=True)
    pairs.keys.sum().backward()
    return {
        "queries": pairs.queries.detach(),
        "keys": pairs.keys.detach(),
        "offset": torch.tensor(pairs.offset),
        "self_index": pairs.self_index,
        "positive_index": pairs.positive_index,
        "self_mask": pairs.self_mask(),
        "positive_mask": pairs.positive_mask(),
        "same_label": pairs.same_label(make_labels(x1.shape[0])[rows]),
        "grad1": z1.grad,
        "grad2": z2.grad,
    }
