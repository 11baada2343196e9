"""The one place for cross-rank gathering.

Contrastive losses need the negatives of every rank. ``gather_with_grad`` concatenates a
tensor from all ranks and lets gradients flow back to the rank that produced each slice.
Its backward sums the incoming gradients over ranks with an ``all_reduce`` (supported by
every backend, gloo included) and returns the local slice, so that after DDP averages the
parameter gradients, a run on W ranks equals one process on the concatenated batch.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor


def is_distributed() -> bool:
    """True when a process group with more than one rank is initialised."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def rank() -> int:
    """This process' rank (0 without a process group)."""
    return dist.get_rank() if is_distributed() else 0


class _GatherWithGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor) -> Tensor:  # type: ignore[override]
        ctx.batch = x.shape[0]
        parts = [torch.empty_like(x) for _ in range(dist.get_world_size())]
        dist.all_gather(parts, x.contiguous())
        return torch.cat(parts, dim=0)

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:  # type: ignore[override]
        grad = grad.contiguous()
        dist.all_reduce(grad, op=dist.ReduceOp.SUM)
        start = dist.get_rank() * ctx.batch
        return grad[start : start + ctx.batch]


def gather_with_grad(x: Tensor) -> Tensor:
    """Concatenate ``x`` over ranks along dim 0, differentiably.

    Args:
        x: Local tensor ``[n, ...]``; every rank must pass the same ``n``.

    Returns:
        ``[world_size * n, ...]`` in rank order; ``x`` itself without a process group.
    """
    if not is_distributed():
        return x
    return _GatherWithGrad.apply(x)


def gather_no_grad(x: Tensor) -> Tensor:
    """Concatenate ``x`` over ranks along dim 0 without gradient (for evaluation banks)."""
    if not is_distributed():
        return x
    parts = [torch.empty_like(x) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, x.contiguous())
    return torch.cat(parts, dim=0)


def gather_uneven(x: Tensor) -> Tensor:
    """Like [`gather_no_grad`][] for per-rank tensors of different lengths along dim 0
    (shards ``rank::world`` of a dataset): pad to the longest, gather, drop the padding."""
    if not is_distributed():
        return x
    size = torch.tensor([x.shape[0]], device=x.device)
    sizes = gather_no_grad(size).tolist()
    longest = max(sizes)
    padded = x.new_zeros((longest, *x.shape[1:]))
    padded[: x.shape[0]] = x
    parts = gather_no_grad(padded).split(longest)
    return torch.cat([part[:n] for part, n in zip(parts, sizes, strict=True)])
