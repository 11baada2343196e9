"""Read an offline W&B run folder (``<run folder>/wandb/offline-run-*``) back in tests.

wandb 0.31 writes everything a run logs into one ``run-<id>.wandb`` file and no longer
ships a Python reader for it (the writer is the Go ``wandb-core``). The file is a
LevelDB-style log of protobuf records (:mod:`wandb.proto.wandb_internal_pb2`):

* a 7-byte file header: ``b":W&B"``, the magic ``0xBEE1`` (uint16, little endian) and the
  format version ``0``;
* then 32 KiB blocks (counted from the start of the file, header included); a record
  chunk has a 7-byte header (CRC-32 of type byte + data as uint32, data length as
  uint16, chunk type as uint8: 1 full, 2 first, 3 middle, 4 last) followed by its data;
  fewer than 7 bytes left in a block are zero padding.

This module reassembles the chunks, checks every CRC, and decodes each record; a test
reads the history rows (what ``wandb.log`` received, media included) and the run record
(project, group, job type, display name).
"""

from __future__ import annotations

import json
import struct
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
from wandb.proto import wandb_internal_pb2 as pb

FILE_HEADER = struct.pack("<4sHB", b":W&B", 0xBEE1, 0)
BLOCK = 32 * 1024
CHUNK_HEADER = struct.Struct("<IHB")
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def read_records(path: Path) -> Iterator[pb.Record]:
    """Every record of a ``run-<id>.wandb`` file, in the order written.

    Raises:
        ValueError: Not a W&B transaction log, a corrupt chunk, or a bad chunk sequence.
    """
    data = Path(path).read_bytes()
    if not data.startswith(FILE_HEADER):
        raise ValueError(f"{path}: not a W&B run file (header {data[:7]!r})")
    pos, pending = len(FILE_HEADER), bytearray()
    in_record = False
    while pos + CHUNK_HEADER.size <= len(data):
        left_in_block = BLOCK - pos % BLOCK
        if left_in_block < CHUNK_HEADER.size:  # block trailer: zero padding
            pos += left_in_block
            continue
        crc, length, kind = CHUNK_HEADER.unpack_from(data, pos)
        if crc == length == kind == 0:  # zero fill at the end of a block or of the file
            pos += left_in_block
            continue
        start = pos + CHUNK_HEADER.size
        chunk = data[start : start + length]
        if len(chunk) != length or zlib.crc32(chunk, zlib.crc32(bytes([kind]))) != crc:
            raise ValueError(f"{path}: corrupt chunk at byte {pos}")
        pos = start + length
        if in_record != (kind in (MIDDLE, LAST)):
            raise ValueError(f"{path}: chunk of type {kind} out of sequence at byte {pos}")
        if kind == FIRST:
            pending, in_record = bytearray(chunk), True
            continue
        if kind == MIDDLE:
            pending += chunk
            continue
        payload = chunk if kind == FULL else bytes(pending + chunk)
        in_record = False
        record = pb.Record()
        record.ParseFromString(payload)
        yield record


def _item_value(item: pb.HistoryItem) -> Any:
    """The value of a history item (a number, a string, a list, a dict, or None)."""
    field = item.WhichOneof("value")
    if field in ("boolean", "integer", "number", "text"):
        return getattr(item, field)
    return json.loads(item.value_json) if item.value_json else None


def history_row(record: pb.HistoryRecord) -> dict[str, Any]:
    """One ``wandb.log`` call as ``{logged key: value}``.

    wandb-core writes a logged dict (a media value such as ``wandb.Image``) as one item per
    leaf, with ``nested_key = [logged key, field, ...]``; the leaves are put back into
    one dict under the logged key, so a media key reads ``{"_type": "images/separated",
    "filenames": [...], ...}``.
    """
    row: dict[str, Any] = {}
    for item in record.item:
        path = [item.key] if item.key else list(item.nested_key)
        if len(path) == 1:
            row[path[0]] = _item_value(item)
            continue
        node = row.setdefault(path[0], {})
        for part in path[1:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = _item_value(item)
    return row


@dataclass
class OfflineRun:
    """What one offline run folder holds: the run record and its history rows."""

    folder: Path
    run: pb.RunRecord
    rows: list[dict[str, Any]]
    """One dict per ``wandb.log`` call (W&B's ``_step``, ``_runtime``, ... included)."""

    @property
    def keys(self) -> set[str]:
        """Every history key logged at least once."""
        return {key for row in self.rows for key in row}

    def rows_with(self, key: str) -> list[dict[str, Any]]:
        """The history rows that hold ``key``."""
        return [row for row in self.rows if key in row]

    def media_type(self, key: str) -> str | None:
        """W&B's ``_type`` of a media key (``"images/separated"`` for images), else None."""
        for row in self.rows_with(key):
            value = row[key]
            if isinstance(value, dict) and "_type" in value:
                return str(value["_type"])
        return None


def _parse_run(path: Path) -> OfflineRun | None:
    """The run in ``path``, or None while it is incomplete (no exit record yet)."""
    run, rows, finished = None, [], False
    for record in read_records(path):
        kind = record.WhichOneof("record_type")
        if kind == "run" and run is None:
            run = record.run
        elif kind == "history":
            rows.append(history_row(record.history))
        elif kind == "exit":
            finished = True
    return OfflineRun(path.parent, run, rows) if run is not None and finished else None


def read_run(folder: Path, timeout: float = 120.0) -> OfflineRun:
    """Read ``<folder>/run-*.wandb`` (``folder``: one ``offline-run-*`` folder) once the run
    has finished writing it.

    Offline, ``wandb.finish()`` can return before wandb-core has written the file out
    (seen with wandb 0.31: an empty file right after ``finish``), so this waits, up to
    ``timeout`` seconds, for a complete file that ends the run (an exit record).

    Raises:
        TimeoutError: The file is still incomplete after ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    problem = "no run-*.wandb file"
    while True:
        paths = list(Path(folder).glob("run-*.wandb"))
        if len(paths) == 1:
            try:
                run = _parse_run(paths[0])
            except ValueError as err:  # a chunk still being written
                run, problem = None, str(err)
            else:
                problem = "no exit record yet"
            if run is not None:
                return run
        if time.monotonic() > deadline:
            raise TimeoutError(f"{folder}: W&B run file incomplete after {timeout:g} s: {problem}")
        time.sleep(0.05)


def offline_runs(folder: Path) -> list[Path]:
    """The ``offline-run-*`` folders below ``folder`` (a W&B run's are in its run folder,
    ``<save_dir>/<name>/<run id>/wandb/``), oldest first."""
    return sorted(Path(folder).glob("**/wandb/offline-run-*"), key=lambda p: p.name)


class NonFiniteBatch(L.Callback):
    """Makes the loss of one training batch NaN: fills its (float) images with NaN.

    With ``model.init_args.nonfinite_loss: skip`` the batch is skipped and the run logs
    ``train/skipped_nonfinite``; the other batches train and log as usual.

    Args:
        batch_idx: Index (in each epoch) of the batch to poison.
    """

    def __init__(self, batch_idx: int = 1) -> None:
        self.batch_idx = batch_idx

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if batch_idx != self.batch_idx:
            return
        images = batch[0]
        for view in images if isinstance(images, list | tuple) else [images]:
            if not view.is_floating_point():
                raise TypeError(f"NonFiniteBatch needs float images, got {view.dtype}")
            view.fill_(float("nan"))
