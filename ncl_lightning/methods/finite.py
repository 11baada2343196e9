"""The finiteness component of a training module: [`FiniteSlot`][], the check its
training steps call, and [`zero_loss`][], what a skipped step returns.

The [`NonFiniteGuard`][ncl_lightning.methods.guard.NonFiniteGuard] attaches itself to the module at
``setup`` ([`FiniteCheckHost`][ncl_lightning.foundation.components.FiniteCheckHost]); a
[`TrainableModule`][ncl_lightning.methods.TrainableModule] keeps the attachment in a
[`FiniteSlot`][] and delegates to it, so the behaviour is a component, not a mixin.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from ncl_lightning.foundation.components import FiniteCheck
from ncl_lightning.foundation.errors import UsageError
from ncl_lightning.foundation.internals import attached_trainer
from ncl_lightning.methods.guard import NonFiniteGuard


class FiniteSlot:
    """The finite check a module's training steps use: the guard the trainer attached, or,
    without a trainer (a step called by hand), one the slot owns.

    The attached guard belongs to the trainer: like the trainer, it is not pickled.
    """

    def __init__(self) -> None:
        self.attached: FiniteCheck | None = None
        self.own: FiniteCheck | None = None  # built on first use without a trainer

    def check_for(self, module: nn.Module) -> FiniteCheck:
        """The check for ``module``'s current step.

        Raises:
            UsageError: ``module`` has a trainer but no guard among its callbacks
                attached itself.
        """
        trainer = attached_trainer(module)
        if trainer is None:
            if self.own is None:
                self.own = NonFiniteGuard()
            return self.own
        check = self.attached
        if check is None or not any(c is check for c in trainer.callbacks):
            raise UsageError(
                f"{type(module).__name__}: no NonFiniteGuard among trainer.callbacks; train "
                "with trainer.fit (configure_callbacks adds it) or add "
                "ncl_lightning.default_callbacks() to the Trainer"
            )
        return check

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "attached": None}  # the trainer's callback


def zero_loss(module: nn.Module, device: torch.device) -> Tensor:
    """A zero loss connected to every trainable parameter of ``module``: zero gradients,
    the same backward and all-reduce on every rank."""
    params = [p for p in module.parameters() if p.requires_grad]
    if not params:
        return torch.zeros((), device=device)
    return sum(p.sum() for p in params) * 0.0  # type: ignore[return-value]
