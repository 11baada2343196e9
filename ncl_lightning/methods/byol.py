"""BYOL: Bootstrap Your Own Latent (Grill et al., NeurIPS 2020)."""

from __future__ import annotations

import copy
import math
from typing import Any, Literal

import torch
from torch import Tensor, nn

from ncl_lightning.foundation.validation import check_choice, check_range
from ncl_lightning.methods.simsiam import SimSiam
from ncl_lightning.methods.ssl import Encoded
from ncl_lightning.nn.protocols import Backbone

EMASchedule = Literal["cosine", "constant"]


def ema_decay_at(base: float, step: int, total_steps: int, schedule: EMASchedule) -> float:
    """BYOL's target decay at optimiser step ``step`` of ``total_steps``.

    ``"cosine"``: ``τ_k = 1 - (1 - τ_base) (cos(π k / K) + 1) / 2`` (Grill et al., Sec. 3.2),
    from ``τ_base`` at ``k = 0`` to 1 at ``k = K``; ``"constant"``: ``τ_base``.
    """
    if schedule == "constant" or total_steps <= 0:
        return base
    progress = min(max(step / total_steps, 0.0), 1.0)
    return 1.0 - (1.0 - base) * (math.cos(math.pi * progress) + 1.0) / 2.0


class BYOL(SimSiam):
    """SimSiam whose targets come from a momentum (EMA) copy of backbone and projector.

    After every optimiser step, each target parameter becomes
    ``ξ ← τ ξ + (1 - τ) θ`` (``θ``: the online parameter) and the target buffers (BN
    statistics) are copied. The target network is part of the state dict, so checkpoints
    resume it exactly; it gets no gradient and no optimiser state.

    Args:
        backbone: Encoder exposing ``out_dim``.
        ema_decay: Base target decay ``τ_base`` in ``[0, 1]`` (BYOL: 0.996; 0 makes the
            target a copy of the online network, i.e. SimSiam).
        ema_schedule: ``"cosine"`` (``τ`` rises to 1 over training) or ``"constant"``.
        **kwargs: Everything [`SimSiam`][] takes (BYOL ImageNet: projector and predictor
            4096-256, two layers each).
    """

    compile_targets = (*SimSiam.compile_targets, "target_backbone", "target_projector")

    capturable = False  # the EMA update follows each step's verdict, read on the host

    def __init__(
        self,
        backbone: Backbone,
        ema_decay: float = 0.996,
        ema_schedule: EMASchedule = "cosine",
        **kwargs: Any,
    ) -> None:
        super().__init__(backbone, **kwargs)
        check_range("ema_decay", ema_decay, 0, 1)
        check_choice("ema_schedule", ema_schedule, ("cosine", "constant"))
        self.target_backbone = copy.deepcopy(self.backbone).requires_grad_(False)
        self.target_projector = copy.deepcopy(self.projector).requires_grad_(False)
        self._targets: list[Tensor] | None = None
        self._last_ema_step = 0

    def _online_target_pairs(self) -> list[tuple[nn.Module, nn.Module]]:
        return [(self.backbone, self.target_backbone), (self.projector, self.target_projector)]

    @torch.no_grad()
    def reset_target(self) -> None:
        """Copy the online backbone and projector into the target network."""
        for online, target in self._online_target_pairs():
            target.load_state_dict(online.state_dict())

    @torch.no_grad()
    def update_target(self, decay: float) -> None:
        """``ξ ← decay · ξ + (1 - decay) · θ`` for every parameter; buffers are copied."""
        for online, target in self._online_target_pairs():
            for t, o in zip(target.parameters(), online.parameters(), strict=True):
                t.mul_(decay).add_(o.detach(), alpha=1.0 - decay)
            for t, o in zip(target.buffers(), online.buffers(), strict=True):
                t.copy_(o)

    def current_ema_decay(self) -> float:
        """``τ`` for the optimiser step that just finished."""
        trainer = self.trainer
        return ema_decay_at(
            self.hparams.ema_decay,
            trainer.global_step,
            int(trainer.estimated_stepping_batches),
            self.hparams.ema_schedule,
        )

    def training_step(self, batch: tuple[list[Tensor], Tensor], batch_idx: int) -> Tensor:
        views, _ = batch
        with torch.no_grad():
            self._targets = [self.target_projector(self.target_backbone(v)) for v in views]
        return super().training_step(batch, batch_idx)

    def targets(self, views: list[Encoded]) -> list[Tensor]:
        if self._targets is None:
            raise RuntimeError("BYOL targets are computed in training_step")
        targets, self._targets = self._targets, None
        return targets

    def on_train_start(self) -> None:
        # Steps already taken (a resumed run) have already updated the restored target.
        self._last_ema_step = self.trainer.global_step

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        """EMA update once per optimiser step (not per accumulated micro-batch); none after
        a step that changed nothing (its batches skipped for a non-finite loss)."""
        step = self.trainer.global_step
        if step != self._last_ema_step:
            self._last_ema_step = step
            if self.last_step_skipped:
                return
            decay = self.current_ema_decay()
            self.update_target(decay)
            self.log("train/ema_decay", decay)
