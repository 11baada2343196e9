"""Which speed settings are fastest here: ``python -m benchmarks switches``.

The bare ResNet-18 forward and backward of the throughput benchmark (two views of 256
32x32 images, projector 2048-256) for every combination of precision (``32-true``,
``bf16-mixed``), ``channels_last`` and ``torch.compile``. Each setting is built and
warmed up once (compilation happens there), then timed two steps at a time in rounds that
alternate the settings, so drift of a shared machine hits all alike.
"""

from __future__ import annotations

import itertools

from benchmarks import Timing, throughput
from ncl_lightning.foundation.progress import Progress

PRECISIONS = ("32-true", "bf16-mixed")
CHANNELS_LAST = (False, True)
COMPILE = (False, True)


def run(repeats: int = 3) -> list[Timing]:
    """One row per setting: seconds per step of 256 images, images/s and the range.

    Building and warming up each setting (compilation included) and each timed round are
    the units of the ``[switches k/N]`` progress lines.
    """
    settings = list(itertools.product(PRECISIONS, CHANNELS_LAST, COMPILE))
    rounds = max(1, repeats) + 1
    progress = Progress(len(settings) + rounds, "switches")
    steps = {}
    for precision, channels_last, compiled in settings:
        what = f"build precision={precision}, channels_last={channels_last}, compile={compiled}"
        with progress.unit(what):
            steps[precision, channels_last, compiled] = throughput.BareStep(
                {"precision": precision, "channels_last": channels_last, "torch_compile": compiled}
            )
    for r in range(rounds):
        with progress.unit(f"timed round {r + 1}/{rounds} of every setting"):
            for step in steps.values():
                step.measure(2)
    progress.finish()
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
