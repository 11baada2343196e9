"""Subclasses choosing their defaults, found by class_path in tests/methods/test_loss_argument."""

from __future__ import annotations

from typing import Any

from torch import nn

from ncl_lightning.methods import NCL


class SpectralByDefault(NCL):
    """The declared way: NCL whose loss is the spectral one unless a config names another."""

    default_loss = "spectral"


class SpectralBySetdefault(NCL):
    """The trap: ncl-cli passes ``loss`` explicitly, so this ``setdefault`` would do nothing."""

    def __init__(self, backbone: nn.Module, **kwargs: Any) -> None:
        kwargs.setdefault("loss", "spectral")
        super().__init__(backbone, **kwargs)


class WarmerBySetdefault(NCL):
    """The same trap on another argument: ``if key not in kwargs``."""

    def __init__(self, backbone: nn.Module, **kwargs: Any) -> None:
        if "temperature" not in kwargs:
            kwargs["temperature"] = 0.5
        super().__init__(backbone, **kwargs)


class WarmerByDeclaration(NCL):
    """The declared way for any other argument: a parameter with its own default."""

    def __init__(self, backbone: nn.Module, temperature: float = 0.5, **kwargs: Any) -> None:
        super().__init__(backbone, temperature=temperature, **kwargs)
