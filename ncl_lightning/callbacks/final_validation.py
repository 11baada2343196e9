"""[`FinalValidation`][]: the last epoch validates even when ``check_val_every_n_epoch``
would skip it.

A config that validates every ``n`` epochs (``trainer.check_val_every_n_epoch: 5``) and
trains a number of epochs that is not a multiple of ``n`` never validates its final
weights: a 2-epoch try of such a config writes no validation row, no feature statistics
and (with ``ModelCheckpoint``'s defaults) no checkpoint. Every module of the package adds
this callback at fit when the trainer has none (``configure_callbacks``); epochs before
the last are untouched, so a run whose last epoch validates anyway is unchanged.
"""

from __future__ import annotations

from typing import Any

from lightning.pytorch.callbacks import Callback

from ncl_lightning.callbacks.schedule import last_epoch


class FinalValidation(Callback):
    """Validate at the end of the last epoch (``max_epochs``) when
    ``check_val_every_n_epoch`` would skip it.

    Changes ``trainer.check_val_every_n_epoch`` to 1 at the start of that epoch and puts
    the configured value back when training ends. Nothing changes when the last epoch
    validates anyway, when validation is off (``limit_val_batches: 0``, no validation
    data) or counted in batches (``check_val_every_n_epoch: null``), or when ``max_steps``
    ends the fit first.
    """

    def __init__(self) -> None:
        self.configured: int | None = None  # the value replaced, restored at the end

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        every = trainer.check_val_every_n_epoch
        if not isinstance(every, int) or every <= 1 or not last_epoch(trainer):
            return
        if (trainer.current_epoch + 1) % every != 0:
            self.configured = every
            trainer.check_val_every_n_epoch = 1

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        if self.configured is not None:
            trainer.check_val_every_n_epoch = self.configured
            self.configured = None
