"""Optimiser set-up shared by every LightningModule of the package.

Learning rates are scaled by ``global batch / 256`` (Goyal et al., 2017; SimCLR) and
follow a per-step linear warmup then cosine decay (SimCLR, NCL).
"""

from __future__ import annotations

from typing import Any

import lightning as L
import torch

from ncl_lightning.optim import scale_lr as scaled
from ncl_lightning.optim import warmup_cosine
from ncl_lightning.runtime.errors import ConfigError
from ncl_lightning.runtime.validation import check_at_least, check_range


def configure_warmup_cosine(
    module: L.LightningModule,
    optimizer: torch.optim.Optimizer,
    scale_lr: bool,
    batch_size: int | None,
    warmup_epochs: float,
    min_lr_ratio: float,
) -> dict[str, Any]:
    """Scale the optimiser's learning rates and attach a per-step warmup-cosine schedule.

    Args:
        module: The module being trained (its trainer gives world size and step count).
        optimizer: Optimiser over the module's parameter groups (peak rates at batch 256).
        scale_lr: Multiply every group's rate by ``batch_size * world * accumulation / 256``.
        batch_size: Per-device batch size (needed when ``scale_lr``).
        warmup_epochs: Linear warmup length in epochs (fractions allowed).
        min_lr_ratio: Final rate of the cosine, relative to the peak.

    Returns:
        What ``configure_optimizers`` returns: optimiser and a step-interval scheduler.
    """
    trainer = module.trainer
    if scale_lr:
        if batch_size is None:
            raise ConfigError(
                "batch_size must be set when scale_lr is true (the per-device batch size "
                "scales the learning rate), got None"
            )
        world = trainer.world_size * trainer.accumulate_grad_batches
        for group in optimizer.param_groups:
            group["lr"] = scaled(group["lr"], batch_size * world)
    check_schedule_epochs(trainer.max_epochs)
    total = int(trainer.estimated_stepping_batches)
    epochs = trainer.max_epochs
    warmup = round(warmup_epochs * total / epochs)
    scheduler = warmup_cosine(optimizer, warmup, total, min_lr_ratio)
    return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def check_schedule_epochs(max_epochs: int | None) -> None:
    """The warmup-cosine schedule is laid out over ``trainer.max_epochs`` epochs."""
    if not max_epochs or max_epochs < 1:
        raise ConfigError(
            f"trainer.max_epochs must be >= 1 for the warmup-cosine schedule, got {max_epochs}"
        )


class WarmupCosineOptimization:
    """LightningModule mixin: ``configure_optimizers`` from ``self.optimizer_factory``,
    ``self.param_groups()`` and the ``scale_lr``, ``batch_size``, ``warmup_epochs`` and
    ``min_lr_ratio`` hyper-parameters (shared by every trainable module of the package)."""

    def configure_optimizers(self) -> dict[str, Any]:
        hp = self.hparams  # type: ignore[attr-defined]
        return configure_warmup_cosine(
            self,  # type: ignore[arg-type]
            self.optimizer_factory(self.param_groups()),  # type: ignore[attr-defined]
            scale_lr=hp.scale_lr,
            batch_size=hp.batch_size,
            warmup_epochs=hp.warmup_epochs,
            min_lr_ratio=hp.min_lr_ratio,
        )

    def check_trainer(self, trainer: L.Trainer) -> None:
        """What ``configure_optimizers`` needs of the trainer, checked before ``fit``."""
        check_schedule_epochs(trainer.max_epochs)


def check_common_arguments(
    batch_size: int | None, warmup_epochs: float, min_lr_ratio: float = 0.0
) -> None:
    """One-line ``ConfigError`` for the optimisation arguments every module takes."""
    if batch_size is not None:
        check_at_least("batch_size", batch_size, 1)
    check_at_least("warmup_epochs", warmup_epochs, 0)
    check_range("min_lr_ratio", min_lr_ratio, 0, 1)
