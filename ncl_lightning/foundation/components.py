"""The default run-time components, by injection: a registry of their factories.

The layers below the shell (the methods, the evaluation modules) need the run-time
callbacks (preflight, speed switches, the non-finite guard, the checkpoint record) on a
plain ``Trainer`` too, without importing the shell that defines them. The shell registers
them here ([`ncl_lightning.runtime.components`][] at import, through
[`register_default`][]); a module's ``configure_callbacks`` asks for the ones the trainer
lacks ([`missing_defaults`][]). The package's entry point names the module that registers
them ([`provide_defaults_from`][]), imported the first time they are asked for, so
``import ncl_lightning`` stays light.

The non-finite guard is also injected into the module it guards: it attaches itself
([`FiniteCheckHost`][]), and the training step calls what it was given
([`FiniteCheck`][]), never looking the guard up.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from typing import Any, Protocol, runtime_checkable

from ncl_lightning.foundation.errors import UsageError

_FACTORIES: dict[str, Callable[[], Any]] = {}
_PROVIDERS: list[str] = []


def register_default(key: str, factory: Callable[[], Any]) -> None:
    """Register ``factory`` (a callback class) as the default component ``key``; the
    order of registration is the order the components run in. Registering a key again
    replaces its factory in place."""
    _FACTORIES[key] = factory


def provide_defaults_from(module: str) -> None:
    """Name a module whose import registers the defaults (imported on first use)."""
    if module not in _PROVIDERS:
        _PROVIDERS.append(module)


def _factories() -> dict[str, Callable[[], Any]]:
    if not _FACTORIES:
        for module in _PROVIDERS:
            importlib.import_module(module)
    if not _FACTORIES:
        raise UsageError(
            "no default run-time components are registered: import ncl_lightning (its "
            "__init__ names ncl_lightning.runtime.components, which registers them)"
        )
    return _FACTORIES


def new_defaults(only: Iterable[str] | None = None) -> list[Any]:
    """Fresh instances of the default components (those of ``only``), in their order.

    Raises:
        UsageError: A key of ``only`` no component is registered under.
    """
    factories = _factories()
    wanted = list(factories) if only is None else list(only)
    unknown = [key for key in wanted if key not in factories]
    if unknown:
        raise UsageError(f"no default component {unknown[0]!r}; registered: {', '.join(factories)}")
    return [factory() for key, factory in factories.items() if key in wanted]


def new_default(key: str) -> Any:
    """A fresh instance of the default component ``key`` (raises as [`new_defaults`][])."""
    return new_defaults((key,))[0]


def missing_defaults(trainer: Any | None, only: Iterable[str] | None = None) -> list[Any]:
    """Fresh default components (those of ``only``) whose type ``trainer`` does not have
    yet (an instance of the type or of a subclass counts).

    What a module's ``configure_callbacks`` returns: Lightning replaces trainer callbacks
    of a returned type, so only absent types may be returned.

    Args:
        trainer: The module's trainer, or ``None`` (every default is missing).
        only: Keys of the components wanted (default: all), e.g.
            ``("checkpoint_record",)``.

    Raises:
        UsageError: Nothing registered (the package's entry point was bypassed), or an
            unknown key in ``only``.
    """
    present = list(trainer.callbacks) if trainer is not None else []
    wanted = new_defaults(only)
    return [c for c in wanted if not any(isinstance(p, type(c)) for p in present)]


@runtime_checkable
class FiniteCheck(Protocol):
    """What a training step calls to judge its loss (the non-finite guard)."""

    def check_loss(self, module: Any, loss: Any) -> bool:
        """Judge at once: ``True`` when finite; otherwise stop (raises) or skip (``False``)."""
        ...

    def check_loss_later(self, module: Any, loss: Any) -> bool:
        """Judge on the device, the verdict read at the next batch; ``True`` under a trainer."""
        ...

    def after_finite(self, effect: Callable[[], None]) -> None:
        """Run ``effect`` once the batch is known to be finite (dropped if it is not)."""
        ...

    def judge_pending(self, module: Any) -> None:
        """Read the deferred verdict now, while the batch's gradients still exist."""
        ...


@runtime_checkable
class FiniteCheckHost(Protocol):
    """A module the guard attaches itself to (a ``TrainableModule``)."""

    def attach_finite_check(self, check: FiniteCheck) -> None:
        """Use ``check`` for the training steps run by the module's current trainer."""
        ...
