"""Types of the modules a method is built from, written for the command line.

A method's arguments are read by ``ncl-cli`` (jsonargparse) from their annotations. Typed
``nn.Module``, an argument's help lists every class of torch (thousands of lines) and no
short name resolves to the project's classes. These protocols say what the methods need
instead:

* [`Backbone`][] — the project's encoders subclass it explicitly, so ``ncl-cli`` lists
  them and resolves their short names (``--model.backbone SmallCNN``).
* [`TorchModule`][] — any ``nn.Module`` given by ``class_path`` (a non-negative map, a
  gate, a loss), next to the registered names these arguments usually take.

Neither is needed as a base class: jsonargparse takes any class that implements the
protocol's methods, so a researcher's own ``nn.Module`` works through its ``class_path``.
What a protocol cannot state (that a backbone's ``out_dim`` is an integer >= 1) is checked
when the method is built (``ncl_lightning.methods.checks.check_backbone``).
"""

from __future__ import annotations

from typing import Any, Protocol


class Backbone(Protocol):
    """Encoder of images ``[B, C, H, W]`` into features ``[B, out_dim]``.

    Any ``nn.Module`` whose ``forward`` takes the images as its one positional argument and
    that sets ``out_dim`` (its feature width) in ``__init__`` is a backbone.

    Attributes:
        out_dim: Width ``D`` of the features (the projector and the probes are built for it).
    """

    out_dim: int

    def forward(self, x: Any, /) -> Any:
        """Encode images ``[B, C, H, W]`` to features ``[B, out_dim]``."""
        ...


class TorchModule(Protocol):
    """Any ``torch.nn.Module``, whatever its ``forward`` takes (a loss takes two batches of
    features, a feature map one)."""

    def parameters(self, recurse: Any = True) -> Any:
        """The module's parameters (every ``nn.Module`` has this method)."""
        ...
