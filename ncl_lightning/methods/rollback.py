"""What the non-finite guard needs to judge a step one step later without losing anything.

A training step on a GPU keeps the device busy only if the host never waits for it. The
guard therefore does not read its "is this step finite?" flag in the step that computes
it: [`Verdict`][] copies the flag into pinned host memory (asynchronously) and the
guard reads it at the start of the next batch, by which time the device has long
computed it. Until then the step's effects must be undoable: [`StepSnapshot`][] keeps
copies of the parameters and the optimiser state from just before the optimiser step (two
multi-tensor copies on the device, no host work), and puts them back if the verdict says
the step was not finite.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn


def _copy_into(copies: list[Tensor] | None, sources: list[Tensor]) -> list[Tensor]:
    """``sources`` copied into ``copies`` (reused when their layouts match), or new clones."""
    if copies is not None and [(c.shape, c.dtype, c.device) for c in copies] == [
        (s.shape, s.dtype, s.device) for s in sources
    ]:
        if sources:
            torch._foreach_copy_(copies, sources)
        return copies
    return [s.detach().clone() for s in sources]


class StepSnapshot:
    """The parameters of a module and the state of an optimiser, as they were before a step.

    [`take`][] costs two multi-tensor copies on the device (into buffers reused from step
    to step: one extra copy of the parameters and of the optimiser state in memory);
    [`restore`][] puts everything back, removing optimiser state the step created (a
    momentum buffer made by the first step, say).
    """

    def __init__(self) -> None:
        self._params: list[Tensor] = []
        self._param_copy: list[Tensor] | None = None
        self._state_refs: list[tuple[Any, str]] = []
        self._state_copy: list[Tensor] | None = None
        self._plain: list[tuple[Any, str, Any]] = []
        self._keys: dict[int, set[str]] = {}
        self.taken = False

    @torch.no_grad()
    def take(
        self,
        module: nn.Module,
        optimizer: torch.optim.Optimizer,
        params: list[Tensor] | None = None,
    ) -> None:
        """Copy ``module``'s parameters (``params``, when the caller has them listed) and
        ``optimizer``'s state (before its step)."""
        # under no_grad: no detach views needed
        self._params = list(module.parameters()) if params is None else params
        self._param_copy = _copy_into(self._param_copy, self._params)
        refs, tensors, plain = [], [], []
        for param, state in optimizer.state.items():
            for key, value in state.items():
                if isinstance(value, Tensor):
                    refs.append((param, key))
                    tensors.append(value)
                else:
                    plain.append((param, key, value))
        self._state_refs, self._plain = refs, plain
        self._state_copy = _copy_into(self._state_copy, tensors)
        self._keys = {id(p): set(s) for p, s in optimizer.state.items()}
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


@dataclass
class Verdict:
    """The finiteness code of one step on its way to the host, and what waits on it.

    Attributes:
        where: ``"step S (epoch E, batch B)"`` of the step, for the messages.
        stepped: Whether the optimiser stepped in that batch (a snapshot to restore).
        effects: Callables to run once the step is known to be finite (adding the batch
            to the kNN bank, updating the online probe's training accuracy).
        loss: The step's loss, to name its value in a message.
    """

    where: str
    stepped: bool
    effects: list[Callable[[], None]] = field(default_factory=list)
    loss: Tensor | None = None
    _host: Tensor | None = None
    _event: Any = None

    def publish(self, code: Tensor) -> None:
        """Start the copy of ``code`` (a 0-d device tensor) to the host; no waiting."""
        if code.device.type == "cuda":
            self._host = torch.empty((), dtype=code.dtype, pin_memory=True)
            self._host.copy_(code, non_blocking=True)
            self._event = torch.cuda.Event()
            self._event.record()
        else:
            self._host = code.detach().clone()

    def ready(self) -> bool:
        """Whether the device has written the code (``read`` would not wait)."""
        return self._event is None or bool(self._event.query())

    def read(self) -> float:
        """The code, once the device has written it (long done by the next batch)."""
        if self._event is not None:
            self._event.synchronize()
        if self._host is None:
            return 0.0
        return float(self._host.numpy())  # host memory: no device synchronisation


__all__ = ["StepSnapshot", "Verdict"]
