"""The finiteness checks of the non-finite guard, as device computations: codes that say
what is wrong (a NaN loss, a non-finite buffer, parameter or gradient), computed without
reading anything on the host, and the one-line descriptions read once a fault is known."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from ncl_lightning.foundation.errors import NonFiniteLossError

# Codes of the training-step check (max-reduced over ranks: the highest wins; a NaN loss
# often comes with NaN running statistics, and the loss is what the user sees).
BUFFER, LOSS_INF, LOSS_NAN, PARAMETER = 1.0, 2.0, 3.0, 4.0
# Codes of the gradient check.
GRAD_ABOVE_LIMIT, GRAD_NONFINITE = 1.0, 2.0
# A deferred step's one code: 10 x the training-step code, else the gradient code (a loss
# that is not finite is what the user sees, as in the immediate checks).
LOSS_SCALE = 10.0


def max_abs(tensors: list[Tensor]) -> Tensor:
    """``max |x|`` over every element of ``tensors`` (NaN if any is NaN), on their device."""
    return torch.stack(torch._foreach_norm(tensors, float("inf"))).max()


def first_nonfinite(named: list[tuple[str, Tensor]]) -> tuple[str, str] | None:
    """``(name, "nan" | "inf")`` of the first tensor with a non-finite element, else None."""
    for name, t in named:
        if not torch.isfinite(t).all():
            return name, "nan" if t.isnan().any() else "inf"
    return None


@torch.no_grad()
def module_tensors(module: nn.Module) -> tuple[list[Tensor], list[Tensor]]:
    """``(parameters, buffers)`` of ``module``: the walk of its tree that the checks need,
    which a caller can do once per fit instead of once per step."""
    return list(module.parameters()), list(module.buffers())


def loss_code(
    module: nn.Module, value: Tensor, tensors: tuple[list[Tensor], list[Tensor]] | None = None
) -> Tensor:
    """The training-step check's code on the device: loss, then parameters and buffers
    (one multi-tensor max-norm over both)."""
    code = torch.where(
        value.isnan().any(), LOSS_NAN, torch.where(value.isinf().any(), LOSS_INF, 0.0)
    ).float()
    all_params, all_buffers = module_tensors(module) if tensors is None else tensors
    params = [p for p in all_params if p.is_floating_point() and p.numel()]
    buffers = [b for b in all_buffers if b.is_floating_point() and b.numel()]
    if params or buffers:
        norms = torch.stack(torch._foreach_norm(params + buffers, float("inf")))
        for part, bad in ((norms[: len(params)], PARAMETER), (norms[len(params) :], BUFFER)):
            if part.numel():
                code = torch.maximum(code, torch.where(part.max().isfinite(), 0.0, bad))
    return code


def describe_loss(
    flag: float, value: Tensor | None, buffers: list[tuple[str, Tensor]], hint: str = ""
) -> str:
    """``non-finite loss (nan)`` or ``non-finite buffer <name> (inf)`` for code ``flag``,
    then ``hint`` ([`scale_hint`][])."""
    if flag == BUFFER:
        culprit = first_nonfinite(buffers)
        what = f"buffer {culprit[0]} ({culprit[1]})" if culprit else "buffer on another rank"
    elif value is not None and value.numel() == 1 and not value.isfinite().all():
        what = f"loss ({value.float().item()})"  # "nan", "inf" or "-inf" of this rank
    else:  # this rank's loss is fine; another's is not
        what = f"loss ({'nan' if flag == LOSS_NAN else 'inf'})"
    return f"non-finite {what}{hint}"


def checked_tensors(
    module: nn.Module,
) -> tuple[list[tuple[str, Tensor]], list[tuple[str, Tensor]]]:
    """Floating, non-empty ``(parameters, buffers)`` by name: what must stay finite."""

    def keep(named: Any) -> list[tuple[str, Tensor]]:
        return [(n, t.detach()) for n, t in named if t.is_floating_point() and t.numel()]

    return keep(module.named_parameters()), keep(module.named_buffers())


def grad_code(module: nn.Module, scaled: bool, params: list[Tensor] | None = None) -> Tensor | None:
    """The gradient check's code on the device (``None`` without gradients)."""
    params = list(module.parameters()) if params is None else params
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return None
    total = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)).float())
    limit = module.grad_norm_limit  # type: ignore[attr-defined]
    finite = total.isfinite()
    code = torch.where(finite | scaled, 0.0, GRAD_NONFINITE)
    if limit is not None:
        code = torch.maximum(code, torch.where(finite & (total > limit), GRAD_ABOVE_LIMIT, 0.0))
    return code


def describe_gradients(flag: float, module: nn.Module) -> str:
    """What was wrong with the gradients (read on the host: a fault is rare)."""
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


SMALL_TEMPERATURE = 1e-3
"""Below it the fault message names the temperature (the loss and its gradients scale as
1 / temperature; the papers train at 0.05 to 0.5)."""


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


def nonfinite_parameter_error(named: list[tuple[str, Tensor]], where: str) -> NonFiniteLossError:
    """The error for a parameter an optimiser step made non-finite from finite gradients:
    no finite state is left to save."""
    culprit = first_nonfinite(named)
    what = f"parameter {culprit[0]} ({culprit[1]})" if culprit else "parameter on another rank"
    return NonFiniteLossError(
        f"non-finite {what} at {where}, from an optimiser step with finite gradients; "
        "training stopped; no finite state left to save: resume from an earlier "
        "checkpoint with a lower learning rate or set model.init_args.grad_norm_limit"
    )
