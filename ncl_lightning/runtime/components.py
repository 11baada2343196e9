"""The callbacks every training run of the package gets: :func:`default_callbacks`.

``ncl-cli`` installs them on every run. A Python user with a plain ``L.Trainer`` gets the
same behaviour without doing anything: every module of the package asks for the ones the
trainer lacks in ``configure_callbacks`` (:func:`missing_callbacks`), and a callback the
user configured (same type or a subclass) is kept, never replaced. Passing
``callbacks=ncl_lightning.default_callbacks()`` to the ``Trainer`` is equivalent.
"""

from __future__ import annotations

from collections.abc import Sequence

import lightning as L
from lightning.pytorch.callbacks import Callback

from ncl_lightning.runtime.checkpoint_record import CheckpointRecord
from ncl_lightning.runtime.guard import NonFiniteGuard
from ncl_lightning.runtime.preflight import Preflight
from ncl_lightning.runtime.speed_switches import SpeedSwitches


def default_callbacks() -> list[Callback]:
    """Fresh instances of the package's run-time components, in the order they run.

    * :class:`~ncl_lightning.runtime.preflight.Preflight`: learning rates, model/data fit
      and the training batch size, checked at the start of a fit;
    * :class:`~ncl_lightning.runtime.speed_switches.SpeedSwitches`: ``channels_last`` and
      ``torch_compile``, applied before the strategy wraps the module;
    * :class:`~ncl_lightning.runtime.guard.NonFiniteGuard`: stop or skip on a NaN/Inf
      loss, gradient or buffer (``nonfinite_loss``, ``grad_norm_limit``);
    * :class:`~ncl_lightning.runtime.checkpoint_record.CheckpointRecord`: the record every
      checkpoint carries (method, backbone, logger versions), loggers flushed on save.

    Returns:
        A new list of new callbacks (the guard keeps per-run state: one list per run).

    Example:
        >>> trainer = L.Trainer(max_epochs=100, callbacks=default_callbacks())
    """
    return [Preflight(), SpeedSwitches(), NonFiniteGuard(), CheckpointRecord()]


def missing_callbacks(
    trainer: L.Trainer | None, wanted: Sequence[Callback] | None = None
) -> list[Callback]:
    """The callbacks of ``wanted`` (default: :func:`default_callbacks`) whose type
    ``trainer`` does not have yet (an instance of the type or of a subclass counts).

    What a module's ``configure_callbacks`` returns: Lightning replaces trainer callbacks
    of a returned type, so only absent types may be returned.
    """
    present = list(trainer.callbacks) if trainer is not None else []
    wanted = default_callbacks() if wanted is None else wanted
    return [c for c in wanted if not any(isinstance(p, type(c)) for p in present)]


def drop_shadowed(callbacks: Sequence[Callback], defaults: Sequence[Callback]) -> list[Callback]:
    """``callbacks`` without those of ``defaults`` whose type the user configured too.

    ``ncl-cli`` appends :func:`default_callbacks` to the callbacks of the config; a config
    that lists, say, its own ``NonFiniteGuard`` keeps that one, and only that one.
    """
    own = {id(c) for c in defaults}
    users = [c for c in callbacks if id(c) not in own]
    return [
        c for c in callbacks if id(c) not in own or not any(isinstance(u, type(c)) for u in users)
    ]
