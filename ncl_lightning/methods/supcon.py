"""Supervised contrastive variants of CL and NCL (Khosla et al., NeurIPS 2020).

The positives of an anchor are all other samples of the (global) batch with its label,
across both views; see [`supcon`][ncl_lightning.losses.supcon.supcon]. Features are those of
the parent method (CL's projector output, NCL's non-negative map); only the loss changes.
"""

from __future__ import annotations

from typing import Any, ClassVar

from torch import Tensor

from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.losses.supcon import SupConLoss
from ncl_lightning.methods.cl import CL
from ncl_lightning.methods.ncl import NCL
from ncl_lightning.methods.ssl import Encoded
from ncl_lightning.nn.protocols import Backbone


class _SupConMixin:
    """Replaces the objective of [`CL`][] (or a subclass) by [`SupConLoss`][].

    Args:
        backbone: Encoder exposing ``out_dim``.
        loss: ``info_nce`` or ``None`` (the same): SupCon is the supervised InfoNCE loss.
        temperature: SupCon temperature (CIFAR: 0.2).
        gather_distributed: Take candidates and their labels from every rank under DDP.
        **kwargs: Everything the parent method takes.
    """

    needs_labels: ClassVar[bool] = True

    def __init__(
        self,
        backbone: Backbone,
        loss: str | None = None,
        temperature: float = 0.2,
        gather_distributed: bool = True,
        **kwargs: Any,
    ) -> None:
        if loss not in (None, "info_nce"):
            raise ConfigError(
                f"{type(self).__name__} uses the supervised InfoNCE loss (SupCon); loss "
                f"must be 'info_nce', got {loss!r}",
                key="loss",
            )
        super().__init__(
            backbone,
            loss=loss,
            temperature=temperature,
            gather_distributed=gather_distributed,
            **kwargs,
        )
        self.loss_fn = SupConLoss(temperature, gather_distributed)

    def objective(self, views: list[Encoded], labels: Tensor) -> Tensor:
        """SupCon over the two views' features ``[B, d]`` and the labels ``[B]``."""
        if len(views) != 2:
            raise ConfigError(f"{type(self).__name__} expects 2 views per image, got {len(views)}")
        return self.loss_fn(views[0].z, views[1].z, labels)


class SupConCL(_SupConMixin, CL):
    """CL trained with the supervised contrastive loss: same-label samples are positives.

    Args:
        backbone: Encoder exposing ``out_dim``.
        loss: ``info_nce`` or ``None`` (kept for config compatibility with [`CL`][]).
        temperature: SupCon temperature (CIFAR: 0.2).
        gather_distributed: Take candidates and their labels from every rank under DDP.
        **kwargs: Everything [`CL`][] takes.
    """


class SupConNCL(_SupConMixin, NCL):
    """NCL (non-negative features) trained with the supervised contrastive loss.

    Args:
        backbone: Encoder exposing ``out_dim``.
        loss: ``info_nce`` or ``None`` (kept for config compatibility with [`NCL`][]).
        temperature: SupCon temperature (CIFAR: 0.2).
        gather_distributed: Take candidates and their labels from every rank under DDP.
        **kwargs: Everything [`NCL`][] takes (``nonneg``, projector sizes, ...).
    """
