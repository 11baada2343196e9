"""When, where and on what callbacks act: epoch schedule, run folder, feature spaces."""

from __future__ import annotations

from pathlib import Path

import lightning as L
from lightning.pytorch.loggers import WandbLogger

from ncl_lightning.foundation.errors import ConfigError


def check_spaces(spaces: list[str]) -> None:
    """``ConfigError`` unless ``spaces`` is a non-empty list of feature names (``z``, ``h``:
    fields of the method's [`Encoded`][ncl_lightning.methods.ssl.Encoded])."""
    if not spaces or not all(isinstance(s, str) and s.isidentifier() for s in spaces):
        raise ConfigError(
            f"spaces must be a non-empty list of feature names, got {spaces}", key="spaces"
        )


def missing_spaces(
    owner: str, spaces: list[str], pl_module: L.LightningModule, outputs: object
) -> None:
    """``ConfigError`` when the eval step's ``outputs`` lack one of ``spaces``."""
    missing = [s for s in spaces if not hasattr(outputs, s)]
    if missing:
        raise ConfigError(
            f"{owner}(spaces={spaces}): {type(pl_module).__name__}'s eval steps return "
            f"{type(outputs).__name__} without {missing}",
            key="spaces",
        )


def epoch_due(trainer: L.Trainer, every_n_epochs: int) -> bool:
    """True at the validation of every n-th epoch and of the last one (never in sanity check)."""
    if trainer.sanity_checking:
        return False
    epoch = trainer.current_epoch + 1
    last = trainer.max_epochs is not None and epoch >= trainer.max_epochs
    return epoch % every_n_epochs == 0 or last


def batch_limit(trainer: L.Trainer, stage: str, loader: object) -> int | None:
    """Batches of ``loader`` a callback that encodes a split by itself may read, so that
    ``fast_dev_run`` and ``limit_val_batches`` / ``limit_test_batches`` bound its work as
    they bound the trainer's; ``None`` (the whole loader) without such a limit.

    An integer limit is a count of batches (``fast_dev_run`` sets it), a fraction below 1
    that share of the loader's batches (at least one).
    """
    limit = trainer.limit_val_batches if stage == "val" else trainer.limit_test_batches
    if limit is None or isinstance(limit, bool):
        return None
    if isinstance(limit, int):
        return limit
    if limit >= 1.0:
        return None
    try:
        return max(1, int(len(loader) * limit))  # type: ignore[arg-type]
    except TypeError:  # a loader without a length: the trainer's own count of batches
        counts = trainer.num_val_batches if stage == "val" else trainer.num_test_batches
        return int(counts[0]) if counts and counts[0] != float("inf") else None


def run_dir(trainer: L.Trainer) -> Path:
    """The run's own folder: the logger's version folder, else ``default_root_dir``.

    Call it on every rank: ``trainer.log_dir`` is a collective under DDP.
    """
    logger = trainer.logger
    if logger is None:
        return Path(trainer.default_root_dir)
    if isinstance(logger, WandbLogger):  # checkpoints live in save_dir/project/run-id
        root = Path(logger.save_dir or trainer.default_root_dir)
        return root / str(logger.name) / str(logger.version)
    return Path(trainer.log_dir or trainer.default_root_dir)
