"""Atomic checkpoint writes: a kill while saving never leaves a broken ``last.ckpt``.

Lightning's ``TorchCheckpointIO`` writes local files through an fsspec transaction whose
temporary file lives in the system temp folder; committing it is a ``shutil.move``,
which copies (and can be cut half-way) when that folder is on another file system, and
nothing is synced to disk. :class:`AtomicCheckpointIO` writes a temporary file beside
the target, syncs it and renames it over the target (``os.replace``: atomic on POSIX
and Windows), so a reader sees either the old complete file or the new complete one.

``ncl-cli`` installs it on every Trainer; from Python pass
``Trainer(plugins=[AtomicCheckpointIO()])``.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.utilities.cloud_io import _is_local_file_protocol
from lightning.pytorch.plugins.io import TorchCheckpointIO

TMP_MARK = ".tmp-"


def atomic_save(obj: Any, path: str | Path) -> None:
    """``torch.save(obj, path)`` that replaces ``path`` only once the new file is complete.

    Args:
        obj: What ``torch.save`` accepts (a checkpoint dict).
        path: Target file; its folder is created.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}{TMP_MARK}{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    with contextlib.suppress(OSError):  # make the rename itself durable
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def is_partial(path: str | Path) -> bool:
    """Whether ``path`` is a temporary file of an unfinished :func:`atomic_save`."""
    return TMP_MARK in Path(path).name


class AtomicCheckpointIO(TorchCheckpointIO):
    """``TorchCheckpointIO`` whose local writes are atomic (see the module docstring);
    remote URLs (``s3://``...) keep Lightning's behaviour."""

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: str | Path, storage_options: Any | None = None
    ) -> None:
        if storage_options is not None or not _is_local_file_protocol(path):
            super().save_checkpoint(checkpoint, path, storage_options)
            return
        atomic_save(checkpoint, path)


__all__ = ["AtomicCheckpointIO", "atomic_save", "is_partial"]
