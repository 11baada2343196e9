"""Optimisers, schedules and parameter-group helpers for self-supervised pre-training."""

from __future__ import annotations

from ncl_lightning.foundation.validation import check_at_least
from ncl_lightning.optim.lars import LARS
from ncl_lightning.optim.param_groups import NORM_LAYERS, decay_param_groups, split_decay_params
from ncl_lightning.optim.schedulers import warmup_cosine, warmup_step


def scale_lr(base_lr: float, global_batch_size: int, reference: int = 256) -> float:
    """Linear lr scaling rule (Goyal et al., 2017): ``base_lr * global_batch_size / reference``.

    SimCLR's CIFAR recipe is ``lr = 0.4 * batch / 256`` with LARS.

    Args:
        base_lr: Learning rate at the reference batch size (>= 0).
        global_batch_size: Batch size summed over all devices (>= 1).
        reference: Batch size ``base_lr`` was tuned for (>= 1).
    """
    check_at_least("base_lr", base_lr, 0)
    check_at_least("global_batch_size", global_batch_size, 1)
    check_at_least("reference", reference, 1)
    return base_lr * global_batch_size / reference


__all__ = [
    "LARS",
    "NORM_LAYERS",
    "decay_param_groups",
    "scale_lr",
    "split_decay_params",
    "warmup_cosine",
    "warmup_step",
]
