"""Optimisers, schedules and parameter-group helpers for self-supervised pre-training."""

from __future__ import annotations

import torch

from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.foundation.registry import Registry
from ncl_lightning.optim.lars import LARS
from ncl_lightning.optim.param_groups import NORM_LAYERS, decay_param_groups, split_decay_params
from ncl_lightning.optim.schedulers import warmup_cosine, warmup_step

OPTIMIZERS: Registry[torch.optim.Optimizer] = Registry("optimizer")
"""Optimiser classes by name: ``"lars"`` ([LARS][ncl_lightning.optim.LARS]), ``"sgd"``,
``"adamw"``."""
OPTIMIZERS.add("lars", LARS)
OPTIMIZERS.add("sgd", torch.optim.SGD)
OPTIMIZERS.add("adamw", torch.optim.AdamW)


def scale_lr(base_lr: float, global_batch_size: int, reference: int = 256) -> float:
    """Linear lr scaling rule (Goyal et al., 2017): ``base_lr * global_batch_size / reference``.

    SimCLR's CIFAR recipe is ``lr = 0.4 * batch / 256`` with LARS.

    Args:
        base_lr: Learning rate at the reference batch size (>= 0).
        global_batch_size: Batch size summed over all devices (>= 1).
        reference: Batch size ``base_lr`` was tuned for (>= 1).
    """
    if base_lr < 0.0:
        raise ConfigError(f"base_lr must be >= 0, got {base_lr}", key="base_lr")
    if global_batch_size < 1:
        raise ConfigError(
            f"global_batch_size must be >= 1, got {global_batch_size}", key="global_batch_size"
        )
    if reference < 1:
        raise ConfigError(f"reference must be >= 1, got {reference}", key="reference")
    return base_lr * global_batch_size / reference


__all__ = [
    "LARS",
    "NORM_LAYERS",
    "OPTIMIZERS",
    "decay_param_groups",
    "scale_lr",
    "split_decay_params",
    "warmup_cosine",
    "warmup_step",
]
