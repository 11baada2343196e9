"""Atomic checkpoint writes: a kill while saving never leaves a broken ``last.ckpt``.

Lightning's ``TorchCheckpointIO`` commits a local file with a ``shutil.move`` from the
system temp folder (a copy, which can be cut half-way, when that is another file system)
and syncs nothing. [`AtomicCheckpointIO`][] writes through
[`atomic_write`][ncl_lightning.foundation.disk.atomic_write] instead: beside the target,
synced, renamed over it; a full disk raises one
[`DiskFullError`][ncl_lightning.foundation.errors.DiskFullError] and keeps the previous
file. ``ncl-cli`` installs it on every Trainer; from Python pass
``Trainer(plugins=[AtomicCheckpointIO()])``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO

from ncl_lightning.foundation.disk import TMP_MARK, atomic_write, remove_stale
from ncl_lightning.foundation.internals import is_local_path

HINT = "give the run a folder on another disk (trainer.default_root_dir)"


def tensor_bytes(obj: Any) -> int:
    """Bytes of the tensors in ``obj`` (dicts, lists, tuples; each storage once): what
    ``torch.save`` writes at least."""
    seen: set[tuple[int, int]] = set()
    total, stack = 0, [obj]
    while stack:
        item = stack.pop()
        if isinstance(item, torch.Tensor):
            storage = item.untyped_storage()
            key = (storage.data_ptr(), storage.nbytes())
            if key not in seen:
                seen.add(key)
                total += storage.nbytes()
        elif isinstance(item, Mapping):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return total


def atomic_save(obj: Any, path: str | Path) -> None:
    """``torch.save(obj, path)`` that replaces ``path`` only once the new file is complete
    (the free space checked against the tensors' size first; module docstring).

    Args:
        obj: What ``torch.save`` accepts (a checkpoint dict).
        path: Target file; its folder is created.
    """
    with atomic_write(path, size=tensor_bytes(obj), estimate=True, hint=HINT) as f:
        torch.save(obj, f)


def is_partial(path: str | Path) -> bool:
    """Whether ``path`` is a temporary file of an unfinished [`atomic_save`][]."""
    return TMP_MARK in Path(path).name


class AtomicCheckpointIO(TorchCheckpointIO):
    """``TorchCheckpointIO`` whose local writes are atomic (see the module docstring);
    remote URLs (``s3://``...) keep Lightning's behaviour. The first write into a folder
    removes the temporary files that killed writers left there
    ([`remove_stale`][ncl_lightning.foundation.disk.remove_stale])."""

    def __init__(self) -> None:
        super().__init__()
        self._cleaned: set[Path] = set()

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: str | Path, storage_options: Any | None = None
    ) -> None:
        if storage_options is not None or not is_local_path(path):
            super().save_checkpoint(checkpoint, path, storage_options)
            return
        folder = Path(path).parent.resolve()
        if folder not in self._cleaned:
            self._cleaned.add(folder)
            remove_stale(folder)
        atomic_save(checkpoint, path)


__all__ = ["AtomicCheckpointIO", "atomic_save", "is_partial", "tensor_bytes"]
