"""Worker of the 2-process gloo test of ``view_pairs`` (importable by spawned children)."""

from __future__ import annotations

import torch
import torch.distributed as dist

from ncl_lightning.losses import view_pairs
from tests.losses.ddp_worker import make_problem


def make_labels(n_total: int) -> torch.Tensor:
    """Labels shared across the two ranks' halves of the batch."""
    return torch.arange(n_total) % 3


def run_rank(rank: int, world: int, init_file: str, out_file: str) -> None:
    """``view_pairs`` of this rank's half (gathering on); save its layout, masks, the label
    mask and the gradient that ``keys.sum()`` sends back to the local views."""
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        _, x1, x2 = make_problem()
        n = x1.shape[0] // world
        rows = slice(rank * n, (rank + 1) * n)
        z1, z2 = x1[rows].clone().requires_grad_(), x2[rows].clone().requires_grad_()
        pairs = view_pairs(z1, z2, gather_distributed=True)
        pairs.keys.sum().backward()
        out = {
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
        torch.save(out, out_file)
    finally:
        dist.destroy_process_group()
