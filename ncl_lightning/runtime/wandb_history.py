"""Read the numbers an offline W&B run logged, for ``python -m ncl_lightning.plot``.

An offline run folder (``<save_dir>/wandb/offline-run-<time>-<id>/``) keeps everything
in one ``run-<id>.wandb`` file: with wandb 0.31 there is no ``wandb-history.jsonl`` and no
Python reader. The file is a LevelDB-style log of protobuf records
(``wandb.proto.wandb_internal_pb2.Record``): a 7-byte header (``b":W&B"``, magic
``0xBEE1``, version 0), then 32 KiB blocks of chunks, each a 7-byte header (CRC-32 of type
byte and data, data length, type: 1 full, 2 first, 3 middle, 4 last) and its data.
[`read_history`][] keeps the history records (one per ``wandb.log``) and turns their
numbers into the plot's [`Point`][ncl_lightning.plot.Point] series, so W&B runs and CSV runs
are drawn alike. A file cut short (a killed run) is read up to its last whole record.
"""

from __future__ import annotations

import json
import math
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ncl_lightning.foundation.errors import DataError
from ncl_lightning.plot.metrics_csv import Point

FILE_HEADER = struct.pack("<4sHB", b":W&B", 0xBEE1, 0)
BLOCK = 32 * 1024
CHUNK = struct.Struct("<IHB")
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4
STEP_KEY, EPOCH_KEY = "trainer/global_step", "epoch"


def record_payloads(path: Path) -> Iterator[bytes]:
    """The serialized records of a ``run-<id>.wandb`` file, in the order written; stops
    at a chunk cut short or failing its CRC at the end (a run killed while writing).

    Raises:
        DataError: Not a W&B run file.
    """
    data = Path(path).read_bytes()
    if not data.startswith(FILE_HEADER):
        raise DataError(f"{path}: not a W&B run file (header {data[:7]!r})")
    pos, pending = len(FILE_HEADER), bytearray()
    while pos + CHUNK.size <= len(data):
        left = BLOCK - pos % BLOCK
        crc, length, kind = CHUNK.unpack_from(data, pos)
        if left < CHUNK.size or crc == length == kind == 0:  # block padding, zero fill
            pos += left
            continue
        chunk = data[pos + CHUNK.size : pos + CHUNK.size + length]
        if len(chunk) != length or zlib.crc32(chunk, zlib.crc32(bytes([kind]))) != crc:
            return
        pos += CHUNK.size + length
        if kind == FIRST:
            pending = bytearray(chunk)
        elif kind == MIDDLE:
            pending += chunk
        else:
            yield bytes(chunk if kind == FULL else pending + chunk)


def _number(item: Any) -> float | None:
    """A history item's value as a float, or None (media, text, lists, dicts)."""
    field = item.WhichOneof("value")
    if field in ("integer", "number", "boolean"):
        return float(getattr(item, field))
    if field is None and item.value_json:
        try:
            value = json.loads(item.value_json)
        except ValueError:
            return None
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        if value in ("NaN", "nan"):
            return math.nan
    return None


def history_rows(path: Path) -> list[dict[str, float]]:
    """The numbers of every history row (``wandb.log`` call) of a run file: ``{key:
    value}`` without W&B's own ``_…`` keys and without media or tables."""
    from wandb.proto import wandb_internal_pb2 as pb  # the logger's dependency, used here

    rows = []
    for payload in record_payloads(path):
        record = pb.Record()
        record.ParseFromString(payload)
        if record.WhichOneof("record_type") != "history":
            continue
        row = {}
        for item in record.history.item:
            key = item.key or "/".join(item.nested_key)
            value = _number(item)
            if value is not None and not key.startswith("_") and len(item.nested_key) <= 1:
                row[key] = value
        rows.append(row)
    return rows


def read_history(path: Path) -> dict[str, list[Point]]:
    """The series of a ``run-<id>.wandb`` file as the plot reads a ``metrics.csv``: each
    key's values with the ``trainer/global_step`` and ``epoch`` of their row (no epoch
    where the row has none; a row without a global step, which Lightning never logs, is
    skipped).

    Raises:
        DataError: Not a W&B run file.
    """
    series: dict[str, list[Point]] = {}
    for row in history_rows(Path(path)):
        step = row.get(STEP_KEY)
        epoch = row.get(EPOCH_KEY)
        for key, value in row.items():
            if key in (STEP_KEY, EPOCH_KEY) or step is None:
                continue
            point = Point(int(step), None if epoch is None else int(epoch), value)
            series.setdefault(key, []).append(point)
    return series
