"""The optimisation every trainable module sets up in ``configure_optimizers``: learning
rates scaled by ``global batch / 256`` (Goyal et al., 2017; SimCLR) and a per-step linear
warmup then cosine decay (SimCLR, NCL), or step decay at epoch milestones, laid out in the
optimiser steps of the trainer's fit."""

from __future__ import annotations

import math
from typing import Any

import lightning as L
import torch
from lightning.pytorch.utilities import rank_zero_info

from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.foundation.internals import build_train_loader
from ncl_lightning.optim import scale_lr as scaled
from ncl_lightning.optim.batch_report import batch_layout, describe_batch
from ncl_lightning.optim.schedulers import warmup_cosine, warmup_step


def configure_warmup_cosine(
    module: L.LightningModule,
    optimizer: torch.optim.Optimizer,
    scale_lr: bool,
    batch_size: int | None,
    warmup_epochs: float,
    min_lr_ratio: float,
    milestones: list[int] | None = None,
    gamma: float = 0.1,
) -> dict[str, Any]:
    """Scale the optimiser's learning rates and attach a per-step warmup-cosine schedule
    (or, with ``milestones``, warmup then step decay).

    Args:
        module: The module being trained (its trainer gives world size and step count).
        optimizer: Optimiser over the module's parameter groups (peak rates at batch 256).
        scale_lr: Multiply every group's rate by ``per-device batch * world *
            accumulation / 256`` (samples per update / 256, Goyal et al., 2017), except
            the groups that set ``"scale_lr": False`` themselves (a rate the paper gives
            for every batch size, e.g. BayesNCL's gating head).
        batch_size: The module's per-device batch size: used only when neither the
            training loader nor the attached DataModule gives an integer one
            ([`batch_layout`][ncl_lightning.optim.batch_report.batch_layout]).
        warmup_epochs: Linear warmup length in epochs (fractions allowed), converted with
            the steps of one epoch, also when ``max_steps`` ends the run
            ([`schedule_steps`][]).
        min_lr_ratio: Final rate of the cosine, relative to the peak; reached at the last
            step, ``trainer.estimated_stepping_batches``.
        milestones: Epochs at which the rate is multiplied by ``gamma``
            ([`warmup_step`][ncl_lightning.optim.warmup_step]) instead of the cosine.
        gamma: Step-decay factor.

    Prints once (rank zero) the line of
    [`describe_batch`][ncl_lightning.optim.batch_report.describe_batch].

    Returns:
        What ``configure_optimizers`` returns: optimiser and a step-interval scheduler.

    Raises:
        ConfigError: ``scale_lr`` and no batch size known (loader, DataModule or
            ``batch_size``); a run with neither ``max_epochs`` nor ``max_steps``.
    """
    trainer = module.trainer
    total, warmup, per_epoch = schedule_steps(trainer, warmup_epochs)  # builds the loader
    layout = batch_layout(trainer, batch_size, required=scale_lr)
    lrs: list[tuple[float, float]] = []  # (configured, peak) of the groups scale_lr covers
    kept: list[float] = []  # the rates of groups that opt out of the scaling
    for group in optimizer.param_groups:
        configured = group["lr"]
        if scale_lr and not group.get("scale_lr", True):  # a per-group key torch keeps
            kept.append(configured)
            continue
        if scale_lr:
            group["lr"] = scaled(configured, layout.per_update)
        lrs.append((configured, group["lr"]))
    summary = getattr(getattr(trainer, "datamodule", None), "loader_summary", None)
    loader = summary() if callable(summary) else None
    rank_zero_info(describe_batch(layout, lrs, scale_lr, loader=loader, unscaled=kept))
    if milestones:
        if per_epoch is None:
            raise ConfigError(
                "lr_milestones are epochs, but the training loader has no length",
                key="lr_milestones",
            )
        scheduler = warmup_step(optimizer, warmup, per_epoch, milestones, gamma)
    else:
        scheduler = warmup_cosine(optimizer, warmup, total, min_lr_ratio)
    return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def check_schedule_length(max_epochs: int | None, max_steps: int | None) -> None:
    """The warmup-cosine schedule needs a finite run: ``trainer.max_epochs >= 1``, or
    ``trainer.max_steps >= 1`` with ``max_epochs`` -1 (what ``Trainer(max_steps=N)``
    sets)."""
    if max_epochs is not None and max_epochs >= 1:
        return
    if max_epochs in (None, -1) and max_steps is not None and max_steps >= 1:
        return
    raise ConfigError(
        "the warmup-cosine schedule needs a finite run: set trainer.max_epochs >= 1 or "
        f"trainer.max_steps >= 1 (got max_epochs={max_epochs}, max_steps={max_steps})",
        key="trainer.max_epochs",
    )


def schedule_steps(trainer: Any, warmup_epochs: float) -> tuple[int, int, int | None]:
    """``(total, warmup, per_epoch)`` optimiser steps of ``trainer``'s fit.

    ``total`` is ``trainer.estimated_stepping_batches`` (``max_steps``, or ``max_epochs``
    epochs, whichever ends first), ``per_epoch`` ``ceil(num_training_batches /
    accumulate_grad_batches)`` (``None`` for a loader without a length) and ``warmup``
    ``round(warmup_epochs * per_epoch)``: a run stopped by ``max_steps`` warms up over the
    same steps as one stopped by ``max_epochs``. Builds the training loader when Lightning
    has not (``Trainer(max_steps=N)`` does not load it to count steps).

    Raises:
        ConfigError: No finite length ([`check_schedule_length`][]), or a warmup in
            epochs over a training loader without a length.
    """
    check_schedule_length(trainer.max_epochs, trainer.max_steps)
    total = trainer.estimated_stepping_batches
    build_train_loader(trainer)
    batches = trainer.num_training_batches
    per_epoch = None
    if math.isfinite(batches):
        per_epoch = max(1, math.ceil(batches / trainer.accumulate_grad_batches))
    if not math.isfinite(total) or total < 1:
        raise ConfigError(
            "the warmup-cosine schedule needs a finite run: the training loader has no "
            "length, so set trainer.max_steps >= 1",
            key="trainer.max_steps",
        )
    if per_epoch is None and warmup_epochs > 0:
        raise ConfigError(
            f"warmup_epochs={warmup_epochs} needs the steps of an epoch, but the training "
            "loader has no length; set warmup_epochs: 0",
            key="warmup_epochs",
        )
    # warmup_epochs * (steps of max_epochs epochs) / max_epochs, in this order: bit for bit
    # the warmup max_epochs-only runs always had (their total is those steps).
    epochs = max(trainer.max_epochs, 1)
    return int(total), round(warmup_epochs * ((per_epoch or 0) * epochs) / epochs), per_epoch
