"""When, where and on what callbacks act: epoch schedule, run folder, feature spaces,
class names."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

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
    owner: str,
    spaces: list[str],
    pl_module: L.LightningModule,
    outputs: object,
    strict: bool = True,
) -> list[str]:
    """The ``spaces`` the eval step's ``outputs`` lack; a ``ConfigError`` naming them
    instead when ``strict`` and there are any."""
    missing = [s for s in spaces if not hasattr(outputs, s)]
    if missing and strict:
        raise ConfigError(
            f"{owner}(spaces={spaces}): {type(pl_module).__name__}'s eval steps return "
            f"{type(outputs).__name__} without {missing}",
            key="spaces",
        )
    return missing


def last_epoch(trainer: Any) -> bool:
    """Whether the epoch now running is the last one ``max_epochs`` allows."""
    epochs = trainer.max_epochs
    return epochs is not None and epochs > 0 and trainer.current_epoch + 1 >= epochs


def epoch_due(trainer: L.Trainer, every_n_epochs: int) -> bool:
    """True at the validation of every n-th epoch and of the last one (never in sanity check)."""
    if trainer.sanity_checking:
        return False
    return (trainer.current_epoch + 1) % every_n_epochs == 0 or last_epoch(trainer)


class EvalStream(L.Callback):
    """Streams the eval steps' outputs into metrics: ``_start(stage, active)`` at each
    validation (active when ``epoch_due``) and test, then the subclass's ``_update`` after
    every batch while active and its ``_log`` at the end of the epoch when ``_metrics`` were
    fed."""

    every_n_epochs: int = 1

    def __init__(self) -> None:
        self._metrics: dict[str, Any] = {}
        self._active = False

    def on_validation_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._start("val", epoch_due(trainer, self.every_n_epochs))

    def on_test_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._start("test", True)

    def _start(self, stage: str, active: bool) -> None:
        self._active = active
        self._metrics = {}

    def on_validation_batch_end(
        self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0
    ):
        if self._active:
            self._update(trainer, pl_module, outputs, batch)

    def on_test_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
        if self._active:
            self._update(trainer, pl_module, outputs, batch)

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._finish(trainer, pl_module, "val")

    def on_test_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._finish(trainer, pl_module, "test")

    def _finish(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self._active and self._metrics:
            self._log(trainer, pl_module, stage)
        self._metrics = {}
        self._active = False


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


def _wrapped(dataset: Any) -> list[Any]:
    """``dataset`` and the datasets it wraps (``.dataset``: TransformedDataset -> Subset ->
    the base dataset), at most four."""
    chain = []
    while dataset is not None and len(chain) < 4:
        chain.append(dataset)
        dataset = getattr(dataset, "dataset", None)
    return chain


def class_names(datamodule: Any, dataset: Any, count: int, split: str | None = None) -> list[str]:
    """Names of the ``count`` classes (``"0"``, ``"1"``, ... when none is found): the
    ``classes``, else ``class_names``, of the first holder with one name per class. The
    holders, in order: the DataModule, ``dataset`` (or None) and the datasets it wraps
    (``.dataset``, e.g. torchvision's ``CIFAR10``), and with a ``split`` the DataModule's
    ``base_dataset(split)`` and those it wraps."""
    holders = [datamodule, *_wrapped(dataset)]
    if split is not None and hasattr(datamodule, "base_dataset"):
        holders += _wrapped(datamodule.base_dataset(split))
    for holder in holders:
        for attr in ("classes", "class_names"):
            names = getattr(holder, attr, None)
            if isinstance(names, Sequence) and not isinstance(names, str) and len(names) == count:
                return [str(n) for n in names]
    return [str(c) for c in range(count)]
