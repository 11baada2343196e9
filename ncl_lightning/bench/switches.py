"""Which speed switches are fastest here: ``python -m ncl_lightning.bench switches``.

The bare ResNet-18 forward and backward of the throughput benchmark (two views of 256
32x32 images, projector 2048-256) for every combination of precision (``32-true``,
``bf16-mixed``), ``channels_last`` and ``torch.compile``. Each setting is built and
warmed up once (compilation happens there), then timed two steps at a time in rounds that
alternate the settings, so drift of a shared machine hits all alike.
"""

from __future__ import annotations

import itertools

from ncl_lightning.bench import Timing, throughput

PRECISIONS = ("32-true", "bf16-mixed")
CHANNELS_LAST = (False, True)
COMPILE = (False, True)


def run(repeats: int = 3) -> list[Timing]:
    """One row per setting: seconds per step of 256 images, images/s and the range."""
    steps = {
        (precision, channels_last, compiled): throughput.BareStep(
            {"precision": precision, "channels_last": channels_last, "torch_compile": compiled}
        )
        for precision, channels_last, compiled in itertools.product(
            PRECISIONS, CHANNELS_LAST, COMPILE
        )
    }
    for _ in range(max(1, repeats) + 1):
        for step in steps.values():
            step.measure(2)
    batch = throughput.BATCH_SIZE
    rows = []
    for (precision, channels_last, compiled), step in steps.items():
        low, high = batch / max(step.samples), batch / min(step.samples)
        rows.append(
            Timing(
                f"precision={precision}, channels_last={channels_last}, torch_compile={compiled}",
                batch / step.images_per_second,
                note=f"{step.images_per_second:.1f} img/s (range {low:.1f}-{high:.1f})",
            )
        )
    return rows
