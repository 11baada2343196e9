"""[`StepSnapshot`][]: what the non-finite guard puts back when a batch turns out not to be
finite: the buffers (BatchNorm statistics) from before the batch, and the parameters and
optimiser state from before the optimiser step.

The guard reads a step's verdict one batch later (no host wait in the step), so until then
the step's effects must be undoable; the copies are multi-tensor copies on the device into
buffers reused from step to step (one extra copy of each in memory), no host work.
"""

from __future__ import annotations

from operator import attrgetter
from typing import Any

import torch
from torch import Tensor, nn

_LAYOUT = attrgetter("shape", "dtype", "device")  # read in C: no Python call per tensor


def _copy_into(copies: list[Tensor] | None, sources: list[Tensor]) -> list[Tensor]:
    """``sources`` copied into ``copies`` (reused when their layouts match), or new clones."""
    if copies is not None and list(map(_LAYOUT, copies)) == list(map(_LAYOUT, sources)):
        if sources:
            torch._foreach_copy_(copies, sources)
        return copies
    return [s.detach().clone() for s in sources]


class StepSnapshot:
    """The buffers of a module as they were before a batch, and its parameters and an
    optimiser's state as they were before a step.

    [`take_buffers`][] / [`restore_buffers`][] bracket the forward (the immediate and the
    deferred check); [`take`][] / [`restore`][] bracket the optimiser step (the deferred
    check), [`restore`][] removing optimiser state the step created (a momentum buffer made
    by the first step, say).
    """

    def __init__(self) -> None:
        self._buffers: list[Tensor] = []
        self._buffer_copy: list[Tensor] | None = None
        self._params: list[Tensor] = []
        self._param_copy: list[Tensor] | None = None
        self._state_refs: list[tuple[Any, str]] = []
        self._state_copy: list[Tensor] | None = None
        self._plain: list[tuple[Any, str, Any]] = []
        self._keys: dict[int, set[str]] = {}
        self.taken = False

    @torch.no_grad()
    def take_buffers(self, buffers: list[Tensor]) -> None:
        """Copy ``buffers`` (before the forward changes them)."""
        self._buffers = buffers
        self._buffer_copy = _copy_into(self._buffer_copy, buffers)

    @torch.no_grad()
    def restore_buffers(self) -> None:
        """Put the copied buffers back."""
        if self._buffers and self._buffer_copy is not None:
            torch._foreach_copy_(self._buffers, self._buffer_copy)

    @torch.no_grad()
    def take(
        self,
        module: nn.Module,
        optimizer: torch.optim.Optimizer,
        params: list[Tensor] | None = None,
    ) -> None:
        """Copy ``module``'s parameters (``params``, when the caller has them listed) and
        ``optimizer``'s state (before its step)."""
        self._params = list(module.parameters()) if params is None else params
        self._param_copy = _copy_into(self._param_copy, self._params)
        refs, tensors, plain, keys = [], [], [], {}
        for param, state in optimizer.state.items():
            keys[id(param)] = set(state)
            for key, value in state.items():
                if isinstance(value, Tensor):
                    refs.append((param, key))
                    tensors.append(value)
                else:
                    plain.append((param, key, value))
        self._state_refs, self._plain = refs, plain
        self._state_copy = _copy_into(self._state_copy, tensors)
        self._keys = keys
        self.taken = True

    @torch.no_grad()
    def restore(self, optimizer: torch.optim.Optimizer) -> None:
        """Put the copied parameters and optimiser state back."""
        if not self.taken:
            return
        if self._params:
            torch._foreach_copy_(self._params, self._param_copy)
        for param in list(optimizer.state):
            kept = self._keys.get(id(param), set())
            state = optimizer.state[param]
            for key in [k for k in state if k not in kept]:
                del state[key]  # made by the step being undone
            if not state:
                del optimizer.state[param]
        for (param, key), copy in zip(self._state_refs, self._state_copy or [], strict=True):
            optimizer.state[param][key].copy_(copy)
        for param, key, value in self._plain:
            optimizer.state[param][key] = value
        self.taken = False


__all__ = ["StepSnapshot"]
