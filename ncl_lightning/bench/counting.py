"""Count what a piece of code asks of the device: operator launches and host syncs.

On a GPU, a training step is fast when the host only queues work: every operator is a
launch the host pays for (microseconds each, whatever the tensor size), and every read of
a device value on the host (``Tensor.item``, ``bool(t)``, ``tolist``, ``nonzero``, a
boolean-mask index, ``.cpu()``) makes the host wait until the device has caught up.
Both can be counted on the CPU, where the same code dispatches the same operators:
:class:`OpCounter` counts the ATen operators dispatched inside it, and sorts out the
sync-prone ones.

Example:
    >>> with OpCounter() as count:
    ...     step()
    >>> count.ops, count.syncs  # launches, and e.g. {"item": 1}
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# ATen operators that read a device value on the host, by the name a user would know.
# ``_local_scalar_dense`` is what ``item()``, ``bool()``, ``int()`` and ``float()`` of a
# tensor dispatch; ``nonzero`` (and ``masked_select``, a boolean-mask index) must read
# how many elements there are before they can allocate their output.
_SYNC_OPS = {
    "aten::_local_scalar_dense": "item",
    "aten::nonzero": "nonzero",
    "aten::nonzero_static": None,  # a fixed output size: no sync
    "aten::masked_select": "masked_select",
    "aten::unique": "unique",
    "aten::_unique2": "unique",
    "aten::repeat_interleave": None,  # checked below: a sync only without output_size
}


def _has_bool_index(args: tuple[Any, ...]) -> bool:
    indices = args[1] if len(args) > 1 else ()
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in indices or ())


class OpCounter(TorchDispatchMode):
    """Count the ATen operators dispatched in a ``with`` block, and the sync-prone ones.

    Counts what reaches the dispatcher below autograd: the forward operators, the
    backward's (autograd runs them in this thread on the CPU), an optimiser's, a
    metric's. A multi-tensor (``_foreach_*``) operator counts once, as it launches once
    per chunk of tensors on a GPU.

    ``tolist()`` and ``.cpu()`` of a CPU tensor dispatch nothing that marks a sync, so
    they are counted by wrapping the two methods while the block runs.

    Attributes:
        ops: Operators dispatched.
        by_name: ``Counter`` of operator names (``aten::add.Tensor``...).
        syncs: ``Counter`` of sync-prone calls by kind (``item``, ``nonzero``,
            ``bool_mask_index``, ``masked_select``, ``tolist``, ``cpu``, ...).
    """

    def __init__(self) -> None:
        super().__init__()
        self.ops = 0
        self.by_name: Counter[str] = Counter()
        self.syncs: Counter[str] = Counter()
        self._patched: list[tuple[str, Any]] = []

    @property
    def total_syncs(self) -> int:
        """All sync-prone calls counted."""
        return sum(self.syncs.values())

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.name()
        self.ops += 1
        self.by_name[name] += 1
        overload = name.split(".")[0]
        if overload in _SYNC_OPS and _SYNC_OPS[overload] is not None:
            self.syncs[_SYNC_OPS[overload]] += 1
        elif overload == "aten::repeat_interleave" and kwargs.get("output_size") is None:
            if len(args) < 3 or args[2] is None:
                self.syncs["repeat_interleave"] += 1
        elif overload in ("aten::index", "aten::index_put", "aten::index_put_") and (
            _has_bool_index(args)
        ):
            self.syncs["bool_mask_index"] += 1
        return func(*args, **kwargs)

    def _wrap(self, method: str) -> None:
        original = getattr(torch.Tensor, method)
        counter = self

        def counted(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            counter.syncs[method] += 1
            return original(tensor, *args, **kwargs)

        self._patched.append((method, original))
        setattr(torch.Tensor, method, counted)

    def __enter__(self) -> OpCounter:
        for method in ("tolist", "cpu"):
            self._wrap(method)
        return super().__enter__()

    def __exit__(self, *exc: object) -> None:
        try:
            super().__exit__(*exc)
        finally:
            for method, original in reversed(self._patched):
                setattr(torch.Tensor, method, original)
            self._patched.clear()


__all__ = ["OpCounter"]
