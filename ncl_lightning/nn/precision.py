"""Precision helpers of the objectives: float32 outside autocast.

Objectives run outside autocast on float32 features ([`autocast_off`][],
[`float32`][]): at InfoNCE temperatures of 0.1-0.2, bf16 logits (8 bits of mantissa)
would round the loss.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import NamedTuple

import torch
from torch import Tensor


@contextmanager
def autocast_off(device: torch.device) -> Iterator[None]:
    """Leave any autocast region (bf16-mixed / 16-mixed) for the enclosed ops."""
    with torch.autocast(device_type=device.type, enabled=False):
        yield


def float32(encoded: NamedTuple) -> NamedTuple:
    """The same named tuple with every floating tensor in float32 (others unchanged)."""
    return encoded._make(
        t.float() if isinstance(t, Tensor) and t.is_floating_point() else t for t in encoded
    )
