"""A callback for the resume tests: marks and slows the second epoch so a test can kill
the training process in the middle of it."""

from __future__ import annotations

import os
import time
from pathlib import Path

from lightning.pytorch import Callback


class MarkSecondEpoch(Callback):
    """After batch ``after_batch`` of epoch 1, touch ``marker`` and sleep ``pause`` s per batch
    (first saving a checkpoint to ``save`` when given, as a pre-empted job does).

    Only the timing changes; what is trained is the same with or without it. Active when
    ``marker`` is given (the interrupted run); the reference run leaves it out.
    """

    def __init__(
        self, marker: str = "", after_batch: int = 3, pause: float = 0.5, save: str = ""
    ) -> None:
        self.marker = marker
        self.after_batch = after_batch
        self.pause = pause
        self.save = save

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self.marker and trainer.current_epoch == 1 and batch_idx >= self.after_batch:
            if self.save and batch_idx == self.after_batch:  # a mid-epoch checkpoint
                trainer.save_checkpoint(self.save)
            Path(self.marker).write_text(str(os.getpid()))
            time.sleep(self.pause)
