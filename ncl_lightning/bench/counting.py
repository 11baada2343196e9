"""Count what a piece of code asks of the device: operator launches and host syncs.

On a GPU, a training step is fast when the host only queues work: every operator is a
launch the host pays for (microseconds each, whatever the tensor size), and every read of
a device value on the host (``Tensor.item``, ``bool(t)``, ``tolist``, ``nonzero``, a
boolean-mask index, ``.cpu()``) makes the host wait until the device has caught up.
So does an index assignment of a Python number (``mask[rows, cols] = True``): torch
wraps the number in a CPU tensor and copies it from pageable host memory to the device,
which the CUDA sync debug mode reports as a synchronising operation (seen on an H100,
2026-11-26, in the InfoNCE masks). Both can be counted on the CPU, where the same code
dispatches the same operators:
[`OpCounter`][] counts the ATen operators dispatched inside it, and sorts out the
sync-prone ones.

Example:
    >>> with OpCounter() as count:
    ...     step()
    >>> count.ops, count.syncs  # launches, and e.g. {"item": 1}

Every operator is also Python work on the host before it is a launch: the calls of
functions written in Python that run it (a module's ``forward``, Lightning's hooks, a
loop's bookkeeping). [`PythonCallCounter`][] counts those (``sys.setprofile``).
"""

from __future__ import annotations

import sys
from collections import Counter
from dataclasses import dataclass, field
from types import CodeType, FrameType
from typing import Any

import torch

from ncl_lightning.foundation.internals import TorchDispatchMode

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
    "aten::repeat_interleave": None,  # checked below
}
_INDEX_OPS = ("aten::index", "aten::index_put", "aten::index_put_")


def _has_bool_index(args: tuple[Any, ...]) -> bool:
    indices = (args[1] if len(args) > 1 else None) or ()
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in indices)


def _off_host(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and t.device.type not in ("cpu", "meta")


def sync_kind(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    """The kind of host synchronisation operator ``name`` (``aten::add.Tensor``) asks for
    with these arguments, or ``None``. Copies to the host count only from a device tensor
    (a CPU tensor has nothing to wait for), so they show on a GPU only."""
    overload = name.split(".")[0]
    if overload in _SYNC_OPS:
        if _SYNC_OPS[overload] is not None:
            return _SYNC_OPS[overload]
        # repeat_interleave with tensor repeats must read their sum, unless output_size
        # (keyword-only) gives it; int repeats (self_int) fix the size.
        known = kwargs.get("output_size") is not None or name.endswith(".self_int")
        return "repeat_interleave" if overload == "aten::repeat_interleave" and not known else None
    if overload in _INDEX_OPS:
        if _has_bool_index(args):
            return "bool_mask_index"
        # ``t[idx] = number``: the value is a 0-d CPU tensor copied to t's device. On a CPU
        # run t is on the host too, so the copy is only predicted, for every t.
        values = args[2] if len(args) > 2 else kwargs.get("values")
        scalar = isinstance(values, torch.Tensor) and values.dim() == 0
        return "scalar_index_put" if scalar and values.device.type == "cpu" else None
    if overload == "aten::_to_copy" and args and _off_host(args[0]):
        device = kwargs.get("device")
        if device is not None and torch.device(device).type == "cpu":
            return "to_cpu"
    if overload == "aten::copy_" and len(args) > 1 and _off_host(args[1]):
        blocking = not (args[2] if len(args) > 2 else kwargs.get("non_blocking", False))
        if args[0].device.type == "cpu" and blocking:
            return "copy_to_cpu"
    return None


@dataclass
class Tally:
    """What one part of the code dispatched: operators, of them views, and syncs by kind."""

    ops: int = 0
    views: int = 0
    syncs: Counter[str] = field(default_factory=Counter)

    @property
    def launches(self) -> int:
        """Operators that are not views (a view launches no kernel)."""
        return self.ops - self.views

    def add(self, other: Tally) -> None:
        """Add ``other``'s counts to these."""
        self.ops += other.ops
        self.views += other.views
        self.syncs.update(other.syncs)


class OpCounter(TorchDispatchMode):
    """Count the ATen operators dispatched in a ``with`` block, and the sync-prone ones.

    Counts what reaches the dispatcher below autograd: the forward operators, the
    backward's (autograd runs them in this thread on the CPU, and in its device thread,
    which inherits the mode, on a GPU), an optimiser's, a metric's. A multi-tensor
    (``_foreach_*``) operator counts once, as it launches once per chunk of tensors on a
    GPU. Operators that only make a view (``view``, ``t``, ``expand``, ``detach``...:
    ``OpOverload.is_view``) are counted in [`views`][] as well: they launch no kernel.

    ``tolist()`` and ``.cpu()`` of a CPU tensor dispatch nothing that marks a sync, so
    they are counted by wrapping the two methods while the block runs (and
    ``torch.cuda.synchronize``, an explicit wait).

    Attributes:
        ops: Operators dispatched.
        views: Of them, those that only make a view of their input.
        by_name: ``Counter`` of operator names (``aten::add.Tensor``...).
        syncs: ``Counter`` of sync-prone calls by kind (``item``, ``nonzero``,
            ``bool_mask_index``, ``masked_select``, ``tolist``, ``cpu``, ...).
        part: Label of the code running now; set it from outside (e.g. from training
            hooks) to split the counts by part.
        parts: The counts of each label, a [`Tally`][] each (one ``""`` tally when
            ``part`` is never set).
    """

    def __init__(self) -> None:
        super().__init__()
        self.ops = 0
        self.views = 0
        self.by_name: Counter[str] = Counter()
        self.syncs: Counter[str] = Counter()
        self.part = ""
        self.parts: dict[str, Tally] = {}
        self._patched: list[tuple[Any, str, Any]] = []
        self._host_reads = 0  # > 0 inside a wrapped tolist/cpu: its copy is counted once

    @property
    def total_syncs(self) -> int:
        """All sync-prone calls counted."""
        return sum(self.syncs.values())

    @property
    def launches(self) -> int:
        """Operators that are not views."""
        return self.ops - self.views

    def _tally(self) -> Tally:
        tally = self.parts.get(self.part)
        if tally is None:
            tally = self.parts[self.part] = Tally()
        return tally

    def _sync(self, kind: str) -> None:
        self.syncs[kind] += 1
        self._tally().syncs[kind] += 1

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.name()
        tally = self._tally()
        self.ops += 1
        tally.ops += 1
        if func.is_view:
            self.views += 1
            tally.views += 1
        self.by_name[name] += 1
        kind = sync_kind(name, args, kwargs)
        if kind is not None and not (self._host_reads and kind in ("to_cpu", "copy_to_cpu")):
            self._sync(kind)
        return func(*args, **kwargs)

    def _wrap(self, owner: Any, method: str, kind: str) -> None:
        original = getattr(owner, method)
        counter = self

        def counted(*args: Any, **kwargs: Any) -> Any:
            counter._sync(kind)
            counter._host_reads += 1
            try:
                return original(*args, **kwargs)
            finally:
                counter._host_reads -= 1

        self._patched.append((owner, method, original))
        setattr(owner, method, counted)

    def __enter__(self) -> OpCounter:
        for method in ("tolist", "cpu"):
            self._wrap(torch.Tensor, method, method)
        self._wrap(torch.cuda, "synchronize", "synchronize")
        return super().__enter__()

    def __exit__(self, *exc: object) -> None:
        try:
            super().__exit__(*exc)
        finally:
            for owner, method, original in reversed(self._patched):
                setattr(owner, method, original)
            self._patched.clear()


class PythonCallCounter:
    """Count the Python function calls made in this thread inside a ``with`` block.

    A ``sys.setprofile`` hook counts each ``call`` event (a Python function entered, a
    generator resumed) in [`calls`][] and each ``c_call`` event (a builtin or C-extension
    function called from Python: ``len``, a tensor method, a torch operator's binding) in
    [`c_calls`][]. Operators dispatched in C++ without a Python frame (autograd's backward
    on the host, a captured graph's kernels) are not Python calls and are not counted.
    Only the thread that enters the block is counted (``sys.setprofile`` is per thread):
    for a training step that is the training loop; a loader's pin-memory thread and its
    worker processes are not counted. The block's own entry and exit are left out.

    Profiling slows the code it counts: count in steps apart from the timed ones.

    Attributes:
        calls: Python function calls (and generator resumptions).
        c_calls: Calls of C functions from Python.
        functions: ``Counter`` of the called Python functions' code objects.
        active: Whether the hook is installed now.
    """

    def __init__(self) -> None:
        self.calls = 0
        self.c_calls = 0
        self.functions: Counter[CodeType] = Counter()
        self.active = False
        self._previous: Any = None

    def _profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            self.calls += 1
            self.functions[frame.f_code] += 1
        elif event == "c_call":
            self.c_calls += 1

    def __enter__(self) -> PythonCallCounter:
        self._previous = sys.getprofile()
        self.active = True
        sys.setprofile(self._profile)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.setprofile(self._previous)
        # Left out: this method's own call and its call of sys.setprofile.
        self.calls -= 1
        self.c_calls -= 1
        self.functions[PythonCallCounter.__exit__.__code__] -= 1
        self.functions += Counter()  # drops the zero
        self.active = False

    def top(self, n: int = 8) -> list[tuple[str, int]]:
        """The ``n`` most called Python functions as ``file:line function`` and count."""
        return [
            (f"{_short(code.co_filename)}:{code.co_firstlineno} {_qualname(code)}", count)
            for code, count in self.functions.most_common(n)
        ]


def _qualname(code: CodeType) -> str:
    return getattr(code, "co_qualname", code.co_name)  # co_qualname: Python >= 3.11


def _short(path: str) -> str:
    """The last three parts of a source path (``lightning/pytorch/loops/loop.py``)."""
    return "/".join(path.replace("\\", "/").split("/")[-3:])


__all__ = ["OpCounter", "PythonCallCounter", "Tally", "sync_kind"]
