"""JPEG decoding on the training GPU (``decode_on: device`` of the image-folder DataModules).

With ``augment_on: device`` and ``cache: none`` the loader workers' only job is to decode
and resize every JPEG (~1.4 ms of CPU for a 256x240 file, ~3 ms for 500x375). With
``decode_on: device`` they only read the files: [`EncodedFiles`][] yields each file's
bytes, a batch is an [`EncodedBatch`][] (the bytes zero-padded to one length, the true
lengths and the labels), and the DataModule's ``transfer_batch_to_device`` decodes the
batch with nvJPEG (``torchvision.io.decode_jpeg(..., device="cuda")``, which takes the
bytes from host memory) and resizes every image to the square uint8 source
([`decode_batch`][]); the device views are then made as with any uint8 batch.

The padded length is the batch's longest file rounded up to ``PAD_MULTIPLE`` bytes, so
a run sees a handful of batch shapes instead of one per batch (the bytes never enter a
compiled graph: the decoded ``[B, 3, S, S]`` batch has one shape).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, NamedTuple

import torch
from torch import Tensor
from torch.utils.data import Dataset

from ncl_lightning.data.decode import corrupt_image_error
from ncl_lightning.data.memory import FixedSizeUInt8

DecodeOn = Literal["cpu", "device"]
PAD_MULTIPLE = 1 << 16  # padded byte length: the batch's longest file, rounded up to 64 KiB
JPEG_MAGIC = b"\xff\xd8\xff"


class EncodedBatch(NamedTuple):
    """A training batch of encoded JPEG files (host tensors until decoded).

    Attributes:
        data: uint8 ``[B, L]``: file ``i`` in ``data[i, :lengths[i]]``, zeros after it.
        lengths: int64 ``[B]`` byte lengths.
        labels: int64 ``[B]``.
    """

    data: Tensor
    lengths: Tensor
    labels: Tensor


class EncodedFiles(Dataset):
    """Items ``(bytes, length, label)`` of the JPEG files of ``samples`` (``(path, label)``
    pairs), batched into an [`EncodedBatch`][]; a key is an index or an ``(index,
    sample_seed)`` pair (the views are seeded on the device per batch). ``__getitems__``
    pads the batch's files to one length, so the default collate stacks them.

    Raises:
        CorruptImageError: A file is not a JPEG (the message says to set ``decode_on: cpu``).
    """

    def __init__(self, samples: Sequence[tuple[str, int]]) -> None:
        self.samples = list(samples)

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, key: int | tuple[int, int]) -> EncodedBatch:
        path, label = self.samples[key[0] if isinstance(key, tuple) else key]
        with open(path, "rb") as f:
            data = f.read()
        if not data.startswith(JPEG_MAGIC):  # nvJPEG decodes JPEG only
            raise corrupt_image_error(
                path,
                "not a JPEG file, and decode_on: device decodes JPEG only (set decode_on: cpu)",
            )
        encoded = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        return EncodedBatch(encoded, torch.tensor(len(data)), torch.tensor(label))

    def __getitems__(self, keys: list[Any]) -> list[EncodedBatch]:
        items = [self[key] for key in keys]
        longest = max(len(item.data) for item in items)
        length = -(-longest // PAD_MULTIPLE) * PAD_MULTIPLE
        return [
            item._replace(data=torch.nn.functional.pad(item.data, (0, length - len(item.data))))
            for item in items
        ]


def decode_batch(batch: EncodedBatch, size: int, device: torch.device) -> tuple[Tensor, Tensor]:
    """Decode an [`EncodedBatch`][] on ``device`` to uint8 ``[B, 3, size, size]``
    (shorter side resized to ``size``, antialiased, then centre-cropped: the
    [`FixedSizeUInt8`][ncl_lightning.data.memory.FixedSizeUInt8] source of the CPU path) and
    move the labels there.

    The bytes stay in host memory (``decode_jpeg`` reads them from there); their lengths
    are host values, so nothing waits for the device.

    Args:
        batch: Host tensors from the loader.
        size: Side of the square source (``source_size``, 256 for 224-px views).
        device: A CUDA device (a CPU device decodes with libjpeg, for tests).
    """
    from torchvision.io import ImageReadMode, decode_jpeg

    data = batch.data.cpu()
    encoded = [data[i, :n] for i, n in enumerate(batch.lengths.tolist())]
    images = decode_jpeg(encoded, mode=ImageReadMode.RGB, device=device)
    square = FixedSizeUInt8(size)
    return torch.stack([square(image) for image in images]), batch.labels.to(device)


__all__ = [
    "PAD_MULTIPLE",
    "DecodeOn",
    "EncodedBatch",
    "EncodedFiles",
    "decode_batch",
]
