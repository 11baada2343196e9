"""What a non-finite fault is: the codes the non-finite guard
([`NonFiniteGuard`][ncl_lightning.methods.guard.NonFiniteGuard]) computes on the device, and
the one-line name it gives a fault on the host once one is known (which tensor, which value,
where, and a hint when a small temperature is the likely cause).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
import torch
from torch import Tensor, nn

from ncl_lightning.foundation.errors import NonFiniteLossError

LAST_FINITE_NAME = "last-finite.ckpt"
SMALL_TEMPERATURE = 1e-3
"""Below it the fault message names the temperature (the loss and its gradients scale as
1 / temperature; the papers train at 0.05 to 0.5)."""

# Codes of the loss check (max-reduced over ranks: the highest wins; a NaN loss often comes
# with NaN running statistics, and the loss is what the user sees) ...
BUFFER, LOSS_INF, LOSS_NAN, PARAMETER = 1.0, 2.0, 3.0, 4.0
# ... and of the gradient check. A deferred step's one code is LOSS_SCALE x the loss code,
# else the gradient code.
GRAD_ABOVE_LIMIT, GRAD_NONFINITE = 1.0, 2.0
LOSS_SCALE = 10.0


# -- what a fault is called (read on the host, once a fault is known) -------------------
def first_nonfinite(named: list[tuple[str, Tensor]]) -> tuple[str, str] | None:
    """``(name, "nan" | "inf")`` of the first tensor with a non-finite element, else None."""
    for name, t in named:
        if not torch.isfinite(t).all():
            return name, "nan" if t.isnan().any() else "inf"
    return None


def checked_tensors(
    module: nn.Module,
) -> tuple[list[tuple[str, Tensor]], list[tuple[str, Tensor]]]:
    """Floating, non-empty ``(parameters, buffers)`` by name: what must stay finite."""

    def keep(named: Any) -> list[tuple[str, Tensor]]:
        return [(n, t.detach()) for n, t in named if t.is_floating_point() and t.numel()]

    return keep(module.named_parameters()), keep(module.named_buffers())


def scale_hint(module: nn.Module) -> str:
    """``; the loss scales as 1/temperature = ...`` for a method whose temperature is
    small enough to be the cause of an overflow, else ``""``."""
    hparams = getattr(module, "hparams", None)
    temperature = hparams.get("temperature") if hasattr(hparams, "get") else None
    if isinstance(temperature, int | float) and 0 < temperature < SMALL_TEMPERATURE:
        return (
            f"; the loss and its gradients scale as 1/temperature = {1 / temperature:.3g}: "
            "raise model.init_args.temperature (typical: 0.05 to 0.5)"
        )
    return ""


def describe_loss(flag: float, value: Tensor | None, module: nn.Module) -> str:
    """``non-finite loss (nan)`` or ``non-finite buffer <name> (inf)`` for code ``flag``,
    then the [`scale_hint`][]."""
    if flag == BUFFER:
        culprit = first_nonfinite(checked_tensors(module)[1])
        what = f"buffer {culprit[0]} ({culprit[1]})" if culprit else "buffer on another rank"
    elif value is not None and value.numel() == 1 and not value.isfinite().all():
        what = f"loss ({value.float().item()})"  # "nan", "inf" or "-inf" of this rank
    else:  # this rank's loss is fine; another's is not
        what = f"loss ({'nan' if flag == LOSS_NAN else 'inf'})"
    return f"non-finite {what}{scale_hint(module)}"


def describe_gradients(flag: float, module: nn.Module) -> str:
    """What was wrong with the gradients."""
    named = [(n, p.grad) for n, p in module.named_parameters() if p.grad is not None]
    if not named:  # a captured step: its gradients are gone by the time it is judged
        if flag == GRAD_NONFINITE:
            return f"non-finite gradient norm{scale_hint(module)}"
        return f"gradient norm above grad_norm_limit {module.grad_norm_limit}"  # type: ignore[attr-defined]
    culprit = first_nonfinite(named)
    if culprit is not None:
        return f"non-finite gradient of {culprit[0]} ({culprit[1]})"
    grads = [g for _, g in named]
    if flag == GRAD_NONFINITE:  # finite elements whose squared sum overflows
        peaks = torch.stack(torch._foreach_norm(grads, float("inf"))).float()
        top = int(peaks.argmax())
        return (
            f"gradient norm overflows float32 (largest element: {named[top][0]} "
            f"{float(peaks[top]):.3g}){scale_hint(module)}"
        )
    norms = torch.stack(torch._foreach_norm(grads)).float()
    largest = int(norms.nan_to_num(posinf=0.0).argmax())
    name = f"largest: {named[largest][0]} {float(norms[largest]):.3g}"
    total, limit = float(torch.linalg.vector_norm(norms)), module.grad_norm_limit  # type: ignore[attr-defined]
    return f"gradient norm {total:.3g} above grad_norm_limit {limit} ({name})"


def nonfinite_parameter_error(module: nn.Module, where: str) -> NonFiniteLossError:
    """The error for a parameter an optimiser step made non-finite from finite gradients:
    no finite state is left to save."""
    culprit = first_nonfinite(checked_tensors(module)[0])
    what = f"parameter {culprit[0]} ({culprit[1]})" if culprit else "parameter on another rank"
    return NonFiniteLossError(
        f"non-finite {what} at {where}, from an optimiser step with finite gradients; "
        "training stopped; no finite state left to save: resume from an earlier "
        "checkpoint with a lower learning rate or set model.init_args.grad_norm_limit"
    )


def last_finite_path(trainer: L.Trainer) -> Path:
    """``<ModelCheckpoint dirpath>/last-finite.ckpt``, else under
    ``<default_root_dir>/checkpoints``."""
    callback = trainer.checkpoint_callback
    folder = getattr(callback, "dirpath", None) if callback is not None else None
    if not folder:
        folder = Path(trainer.default_root_dir) / "checkpoints"
    return Path(folder) / LAST_FINITE_NAME


def where(at: tuple[int, int, int] | None) -> str:
    """``step S (epoch E, batch B)`` of a ``(step, epoch, batch)`` position: ``E`` counted
    from 1 as the console's epoch lines count them, ``S`` and ``B`` from 0 as Lightning's
    ``global_step`` and ``batch_idx``."""
    if at is None:
        return "training_step"
    return f"step {at[0]} (epoch {at[1] + 1}, batch {at[2]})"
