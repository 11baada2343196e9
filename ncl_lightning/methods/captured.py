"""The captured training step of a self-supervised method (``step_mode: compiled | graphs``).

On a GPU host eager PyTorch costs ~25-30 µs per operator, so a step of ~1,200 operators is
bound by the host, not by the network. [`CapturedStep`][] runs the steady-state step as a
few ``torch.compile`` graphs (``fullgraph=True``, fixed shapes; with ``graphs`` each is
replayed as a CUDA graph, ``mode="reduce-overhead"``), under Lightning's manual
optimisation:

1. the views' device part (a DataModule's
   [`CapturableViews`][ncl_lightning.foundation.protocols.CapturableViews]);
2. forward + loss + online probe, the loss's non-finite code and a copy of the buffers
   ([`SSLMethod.step_forward`][ncl_lightning.methods.SSLMethod.step_forward]), whose backward
   AOTAutograd compiles with it;
3. [`judge_gradients`][]: the gradient code joins the loss code;
4. [`settle_buffers`][]: the step's verdict (``skip = code > 0``), and the buffers put back
   where it is ``True``;
5. the LARS update ([`LARS.capture`][ncl_lightning.optim.LARS.capture]), masked by ``skip``.

So a non-finite step changes no parameter, optimiser state or buffer, decided on the
device; the host reads the code later, when it is ready (the non-finite guard), and only
then stops or counts the skip. Nothing in the graphs reads the host: the learning rate,
weight decay and momentum reach the update as one device tensor per step, the views'
random parameters as one packed tensor, and logging happens outside, on logging steps.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from lightning.pytorch.utilities import rank_zero_info
from torch import Tensor, nn

from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.methods.guard import grad_code

GRAPH_MODES = {"compiled": "default", "graphs": "reduce-overhead"}
"""``step_mode`` -> ``torch.compile`` mode."""


def capture_mode(step_mode: str, device: torch.device) -> str | None:
    """The ``torch.compile`` mode of ``step_mode`` on ``device``, or ``None`` for an eager
    step: ``eager``, and ``graphs`` where there are no CUDA graphs (a CPU; said once)."""
    if step_mode == "graphs" and device.type != "cuda":
        rank_zero_info(
            f"step_mode: graphs needs CUDA graphs; on {device.type} the training step runs "
            "eagerly (step_mode: compiled compiles it there)"
        )
        return None
    return GRAPH_MODES.get(step_mode)


def check_capturable(trainer: Any, optimizers: list[Any], lars: type) -> None:
    """Before the first captured step: what manual optimisation of a captured step cannot
    do, as one line naming the key.

    Raises:
        ConfigError: gradient clipping, gradient accumulation, a ``GradScaler``
            (``16-mixed``) or an optimiser other than LARS.
    """
    key = "model.init_args.step_mode"
    if trainer.gradient_clip_val:
        raise ConfigError(
            f"step_mode: a captured step does not clip gradients; drop "
            f"trainer.gradient_clip_val ({trainer.gradient_clip_val}) or set {key}: eager",
            key="step_mode",
        )
    if trainer.accumulate_grad_batches != 1:
        raise ConfigError(
            f"step_mode: a captured step steps every batch; drop trainer.accumulate_grad_batches"
            f" ({trainer.accumulate_grad_batches}) or set {key}: eager",
            key="step_mode",
        )
    if getattr(trainer.precision_plugin, "scaler", None) is not None:
        raise ConfigError(
            f"step_mode: 16-mixed's GradScaler reads the host every step; use trainer.precision"
            f" bf16-mixed or 32-true, or set {key}: eager",
            key="step_mode",
        )
    wrong = [type(o).__name__ for o in optimizers if not isinstance(o, lars)]
    if wrong:
        raise ConfigError(
            f"step_mode: a captured step updates with LARS (its update takes tensor "
            f"hyper-parameters), not {', '.join(wrong)}; set model.init_args.optimizer to "
            f"LARS or {key}: eager",
            key="step_mode",
        )


def judge_gradients(code: Tensor, grads: list[Tensor], limit: float | None) -> Tensor:
    """The step's code ``[]``: the loss code, or the gradient code
    ([`grad_code`][ncl_lightning.methods.guard.grad_code]) where that is larger."""
    return torch.maximum(code, grad_code(grads, limit))


def settle_buffers(code: Tensor, buffers: list[Tensor], backup: list[Tensor]) -> Tensor:
    """``skip = code > 0`` (0-d bool), and the buffers (BatchNorm statistics) put back from
    ``backup`` where it is ``True``."""
    skip = code > 0
    for buffer, copy in zip(buffers, backup, strict=True):
        buffer.copy_(torch.where(skip, copy, buffer))
    return skip


class CapturedStep:
    """The compiled parts of a module's training step and the tensors they share.

    Args:
        module: The method (an [`SSLMethod`][ncl_lightning.methods.SSLMethod]) on its
            training device.
        mode: ``torch.compile`` mode (``"default"`` or ``"reduce-overhead"``).
        compile: ``False`` runs the same functions eagerly (the comparison in the tests).

    Attributes:
        params: The trainable parameters (a gradient each after the backward).
        buffers: Every buffer of the module (restored on a skipped step).
    """

    def __init__(self, module: nn.Module, mode: str, compile: bool = True) -> None:
        self.mode = mode
        self.params = [p for p in module.parameters() if p.requires_grad]
        self.buffers = list(module.buffers())
        for buffer in self.buffers:  # updated in place by the graphs (CUDA graphs: no copy)
            torch._dynamo.mark_static_address(buffer)
        self.eager: tuple[Callable[..., Any], ...] = (
            module.step_forward,  # type: ignore[attr-defined]
            judge_gradients,
            settle_buffers,
        )
        options = {"fullgraph": True, "dynamic": False}
        options["mode"] = None if mode == "default" else mode
        self.compiled = (
            tuple(torch.compile(fn, **options) for fn in self.eager) if compile else self.eager
        )
        self._shape: Any = None
        self._odd_said = False

    def parts(self, views: list[Tensor], labels: Tensor) -> tuple[Callable[..., Any], ...]:
        """The compiled functions for a batch of the shape of the first one; the eager ones
        for any other shape (a last partial batch: ``drop_last: false``), said once."""
        shape = ([tuple(v.shape) for v in views], tuple(labels.shape))
        if self._shape is None:
            self._shape = shape
        if shape == self._shape:
            return self.compiled
        odd = (self.eager[0], *self.compiled[1:])  # the judges do not see the batch
        if not self._odd_said:
            self._odd_said = True
            rank_zero_info(
                f"step_mode: a batch of shape {shape[0][0]} (captured: {self._shape[0][0]}) "
                "runs eagerly; set data.init_args.drop_last: true for fixed shapes"
            )
        return odd


__all__ = ["GRAPH_MODES", "CapturedStep", "capture_mode", "check_capturable",
           "judge_gradients", "settle_buffers"]  # fmt: skip
