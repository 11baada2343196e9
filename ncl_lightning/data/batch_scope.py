"""What ``data.init_args.batch_size`` counts: the batch of one device or of the whole run.

With ``batch_scope: device`` (the default) every process loads ``batch_size`` samples per
step, so the global batch grows with the number of devices and nodes. With
``batch_scope: global`` the configured ``batch_size`` is the batch summed over every
device and node, and each of the ``world_size`` processes loads
``batch_size // world_size``: a paper's global batch (and the learning rate scaled from
it, Goyal et al., 2017) stays the same on any number of GPUs.
"""

from __future__ import annotations

from typing import Any, Literal, get_args

from ncl_lightning.foundation.errors import ConfigError, DataError
from ncl_lightning.foundation.validation import check_choice

BatchScope = Literal["device", "global"]
BATCH_SCOPES: tuple[str, ...] = get_args(BatchScope)


def per_device_batch(batch_size: int, batch_scope: BatchScope, world_size: int) -> int:
    """Samples each process loads per step.

    Args:
        batch_size: ``data.init_args.batch_size``.
        batch_scope: ``device`` (``batch_size`` per process) or ``global`` (summed over
            the ``world_size`` processes).
        world_size: Processes of the run (devices x nodes, ``trainer.world_size``).

    Raises:
        ConfigError: ``global`` with a ``batch_size`` that ``world_size`` does not divide
            (one line naming the keys, the world size and the fix).
    """
    check_choice("batch_scope", batch_scope, BATCH_SCOPES)
    if batch_scope == "device":
        return batch_size
    world = max(1, world_size)
    if batch_size % world:
        lower, upper = batch_size // world * world, (batch_size // world + 1) * world
        multiples = f"{lower} or {upper}" if lower else f"{upper}"
        raise ConfigError(
            f"data.init_args.batch_size={batch_size} with batch_scope: global is split over "
            f"{world} processes (world size = devices x nodes) but {world} does not divide "
            f"it; set batch_size to a multiple of {world} (e.g. {multiples}) or change the "
            f"device count",
            key="data.init_args.batch_size",
        )
    return batch_size // world


class ScopedBatch:
    """DataModule mixin: [`per_device_batch_size`][] from ``batch_size``,
    ``batch_scope`` (``device`` unless the DataModule takes the argument) and the
    attached trainer's world size."""

    trainer: Any
    batch_size: int
    batch_scope: BatchScope = "device"

    @property
    def per_device_batch_size(self) -> int:
        """Samples this process loads per training or evaluation step: ``batch_size``, or
        ``batch_size // world_size`` with ``batch_scope: global`` (1 process without a
        trainer)."""
        trainer = self.trainer
        world = trainer.world_size if trainer is not None else 1
        return per_device_batch(self.batch_size, self.batch_scope, world)


def check_train_batches(
    count: int,
    world_size: int,
    batch_size: int,
    drop_last: bool = True,
    hint: str = "",
    batch_scope: BatchScope = "device",
) -> None:
    """Raise [`DataError`][] unless every rank gets at least one training batch.

    Args:
        count: Samples of the training split.
        world_size: Ranks sharing it.
        batch_size: ``data.init_args.batch_size`` (per rank, or summed over the ranks with
            ``batch_scope: global``).
        drop_last: Whether the last incomplete batch is dropped.
        hint: Extra remedy appended to "lower batch_size" (e.g. "or raise ...").
        batch_scope: What ``batch_size`` counts ([`per_device_batch`][]).

    Raises:
        ConfigError: See [`per_device_batch`][].
    """
    per_rank = per_device_batch(batch_size, batch_scope, world_size)
    per_device = count // max(1, world_size)
    scoped = f" with batch_scope: global, {per_rank} per device" if per_rank != batch_size else ""
    if count == 0:
        raise DataError("data: the training split is empty")
    if drop_last and per_device < per_rank:
        raise DataError(
            f"data: the training split has {count} samples ({per_device} per device), fewer "
            f"than one batch (data.init_args.batch_size={batch_size}{scoped}) with "
            f"drop_last={drop_last}; lower batch_size{hint}",
            key="batch_size",
        )
