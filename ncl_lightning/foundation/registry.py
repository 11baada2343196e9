"""A small name -> factory registry used for every choice made by name in a config.

A registry maps lower-case names to factories (classes or callables). ``build`` accepts a
name, a class/callable, or an already-built object, so configs can name a built-in choice
while researchers pass their own implementation. Unknown names raise one
[`ConfigError`][ncl_lightning.foundation.errors.ConfigError] (a ``ValueError``) that lists the
valid names and suggests the closest one, never a silent fallback.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

from ncl_lightning.foundation.errors import ConfigError, did_you_mean

T = TypeVar("T")


class Registry(Generic[T]):
    """Name -> factory mapping with clear errors.

    Args:
        kind: What the registry holds, used in error messages (e.g. ``"non-negative map"``).

    Example:
        >>> ACTIVATIONS = Registry[nn.Module]("activation")
        >>> @ACTIVATIONS.register("relu")
        ... class ReLU(nn.Module): ...
        >>> ACTIVATIONS.build("relu")
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._factories: dict[str, Callable[..., T]] = {}

    def register(self, name: str) -> Callable[[Callable[..., T]], Callable[..., T]]:
        """Decorator registering ``factory`` under ``name`` (case-insensitive)."""
        key = name.lower()

        def decorator(factory: Callable[..., T]) -> Callable[..., T]:
            if key in self._factories:
                raise ConfigError(f"{self.kind} {name!r} is already registered", key="name")
            self._factories[key] = factory
            return factory

        return decorator

    def add(self, name: str, factory: Callable[..., T]) -> None:
        """Register ``factory`` under ``name`` without a decorator."""
        self.register(name)(factory)

    @property
    def names(self) -> list[str]:
        """Sorted registered names."""
        return sorted(self._factories)

    def get(self, name: str, config_key: str | None = None) -> Callable[..., T]:
        """The factory registered under ``name``.

        Args:
            name: Registered name (case-insensitive).
            config_key: The configuration key that holds ``name`` (e.g. ``"nonneg"``),
                named at the start of the error message.

        Raises:
            ConfigError: Unknown name; lists the valid names and the closest one.
        """
        key = name.lower()
        if key not in self._factories:
            where = f"{config_key}: " if config_key else ""
            raise ConfigError(
                f"{where}unknown {self.kind} {name!r}; valid names: {', '.join(self.names)}"
                f"{did_you_mean(key, self.names)}",
                key=config_key,
            )
        return self._factories[key]

    def build(
        self, spec: str | Callable[..., T] | T, config_key: str | None = None, **kwargs: Any
    ) -> T:
        """Build from a registered name, a class/callable, or return a built object as is.

        Args:
            spec: Registered name, a factory to call with ``kwargs``, or an instance.
            config_key: Configuration key holding ``spec``, named in the error message.
            **kwargs: Passed to the factory.
        """
        if isinstance(spec, str):
            return self.get(spec, config_key)(**kwargs)
        if isinstance(spec, type):
            return spec(**kwargs)
        return spec  # an already-built object (module instance or plain function)
