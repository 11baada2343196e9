"""The callbacks every training run of the package gets: [`default_callbacks`][].

``ncl-cli`` installs them on every run. A Python user with a plain ``L.Trainer`` gets the
same behaviour without doing anything: this module registers them as the package's
default components ([`ncl_lightning.foundation.components`][], at import), every module
of the package asks for the ones the trainer lacks in ``configure_callbacks``
([`missing_defaults`][ncl_lightning.foundation.components.missing_defaults]), and a callback the
user configured (same type or a subclass) is kept, never replaced. Passing
``callbacks=ncl_lightning.default_callbacks()`` to the ``Trainer`` is equivalent.
"""

from __future__ import annotations

from collections.abc import Sequence

from lightning.pytorch.callbacks import Callback

from ncl_lightning.callbacks import FeatureStatistics
from ncl_lightning.foundation.components import new_defaults, register_default
from ncl_lightning.methods.guard import NonFiniteGuard
from ncl_lightning.methods.trainable import RUN_TIME_COMPONENTS
from ncl_lightning.runtime.checkpoint_record import CheckpointRecord
from ncl_lightning.runtime.fit_end import FinalValidation
from ncl_lightning.runtime.preflight import Preflight
from ncl_lightning.runtime.speed_switches import SpeedSwitches


def default_feature_statistics() -> FeatureStatistics:
    """The feature statistics of a self-supervised fit whose config lists none: those of
    ``z`` (sparsity, active dimensions, orthogonality, semantic consistency and entropy,
    retrieval) at every validation and test; no SEPIN (it encodes the split again), no
    ``h``. A configured ``FeatureStatistics`` replaces it."""
    return FeatureStatistics(every_n_epochs=1, spaces=["z"], sepin=False, missing="skip")


# In the order they run; the keys are what modules ask for (``only=("checkpoint_record",)``).
register_default("preflight", Preflight)
register_default("speed_switches", SpeedSwitches)
register_default("nonfinite_guard", NonFiniteGuard)
register_default("checkpoint_record", CheckpointRecord)
register_default("final_validation", FinalValidation)
# Only self-supervised methods ask for it (SSLMethod.default_components).
register_default("feature_statistics", default_feature_statistics)


def default_callbacks() -> list[Callback]:
    """Fresh instances of the package's run-time components, in the order they run.

    * [`Preflight`][ncl_lightning.runtime.preflight.Preflight]: learning rates, model/data fit
      and the training batch size, checked at the start of a fit;
    * [`SpeedSwitches`][ncl_lightning.runtime.speed_switches.SpeedSwitches]: ``channels_last`` and
      ``torch_compile``, applied before the strategy wraps the module;
    * [`NonFiniteGuard`][ncl_lightning.methods.guard.NonFiniteGuard]: stop or skip on a NaN/Inf
      loss, gradient or buffer (``nonfinite_loss``, ``grad_norm_limit``);
    * [`CheckpointRecord`][ncl_lightning.runtime.checkpoint_record.CheckpointRecord]: the record
      every checkpoint carries (method, backbone, logger versions), loggers flushed on save;
    * [`FinalValidation`][ncl_lightning.runtime.fit_end.FinalValidation]: the last epoch
      validates even when ``check_val_every_n_epoch`` would skip it.

    A self-supervised method adds [`default_feature_statistics`][] itself at fit
    (``configure_callbacks``) when the trainer has no ``FeatureStatistics``.

    Returns:
        A new list of new callbacks (the guard keeps per-run state: one list per run).

    Example:
        >>> trainer = L.Trainer(max_epochs=100, callbacks=default_callbacks())
    """
    return new_defaults(RUN_TIME_COMPONENTS)


def drop_shadowed(callbacks: Sequence[Callback], defaults: Sequence[Callback]) -> list[Callback]:
    """``callbacks`` without those of ``defaults`` whose type the user configured too.

    ``ncl-cli`` appends [`default_callbacks`][] to the callbacks of the config; a config
    that lists, say, its own ``NonFiniteGuard`` keeps that one, and only that one.
    """
    own = {id(c) for c in defaults}
    users = [c for c in callbacks if id(c) not in own]
    return [
        c for c in callbacks if id(c) not in own or not any(isinstance(u, type(c)) for u in users)
    ]
