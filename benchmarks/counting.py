"""Count what a piece of code asks of the device: operator launches and host syncs.

On a GPU, a training step is fast when the host only queues work: every operator is a
launch the host pays for (microseconds each, whatever the tensor size), and every read of
a device value on the host (``Tensor.item``, ``bool(t)``, ``tolist``, ``nonzero``, a
boolean-mask index, ``.cpu()``) makes the host wait until the device has caught up. So
does an index assignment of a Python number (``mask[rows, cols] = True``): torch wraps the
number in a CPU tensor and copies it from pageable host memory to the device (seen on an
H100, 2026-11-26, in the InfoNCE masks). Both can be counted on the CPU, where the same
code dispatches the same operators.

[`OpCounter`][] runs a block under ``torch.profiler`` (operator shapes and the Python
tracer on) and reads the events: an *operator* is an ``aten::`` event with no ``aten::``
event around it (what Python code or autograd dispatched; ``linear`` counts once, not its
``t`` and ``addmm``), a *sync* is such an operator whose events include a host read
(``_local_scalar_dense``, ``nonzero``, ``masked_select``, ``unique``; on a GPU a CUDA
synchronise or blocking copy), a 0-d value index assignment, or a Python call of
``Tensor.tolist``, ``Tensor.cpu`` or ``torch.cuda.synchronize``. Code labelled with
[`scope`][] (a ``torch.profiler.record_function``) is counted per label.

Example:
    >>> with OpCounter() as count:
    ...     step()
    >>> count.ops, count.syncs  # operators, and e.g. {"item": 1}

Every operator is also Python work on the host before it is a launch: the calls of
functions written in Python that run it (a module's ``forward``, Lightning's hooks, a
loop's bookkeeping). [`PythonCallCounter`][] counts those (``sys.setprofile``).
"""

from __future__ import annotations

import functools
import sys
from collections import Counter
from dataclasses import dataclass, field
from types import CodeType, FrameType
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile, record_function

SCOPE = "ncl-bench/"  # prefix of the record_function labels that split the counts

# A host read of a device value, by the event that does it ...
_HOST_READS = {
    "aten::_local_scalar_dense",
    "aten::nonzero",
    "aten::masked_select",
    "aten::unique",
    "aten::_unique",
    "aten::_unique2",
    "aten::unique_dim",
    "aten::unique_consecutive",
    "cudaStreamSynchronize",
    "cudaDeviceSynchronize",
    "cudaEventSynchronize",
    "cudaMemcpy",
}
# ... named by the operator that asked for it, as a user would know it.
_KINDS = {
    "aten::item": "item",
    "aten::_local_scalar_dense": "item",
    "aten::index": "bool_mask_index",
    "aten::index_put_": "bool_mask_index",
    "aten::_unique2": "unique",
    "aten::to": "copy_to_cpu",
    "aten::_to_copy": "copy_to_cpu",
    "aten::copy_": "copy_to_cpu",
}
# Python calls that read the device on the host whatever they dispatch (on a CPU, nothing).
_PYTHON_READS = {
    "<built-in method tolist of Tensor": "tolist",
    "<built-in method cpu of Tensor": "cpu",
}


def scope(label: str) -> record_function:
    """A ``record_function`` that [`OpCounter`][] counts apart as ``label``."""
    return record_function(SCOPE + label)


@functools.cache
def is_view(name: str) -> bool:
    """Whether the ATen operator ``name`` (``aten::t``) only makes a view (no kernel)."""
    packet = getattr(torch.ops.aten, name.removeprefix("aten::"), None)
    try:
        return any(getattr(packet, o).is_view for o in packet.overloads())
    except (AttributeError, RuntimeError):
        return False


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


def _reads_host(event: Any) -> bool:
    return event.name in _HOST_READS or any(_reads_host(c) for c in event.cpu_children)


def _sync_kind(event: Any) -> str | None:
    """The sync an operator event (with its children) stands for, or ``None``."""
    name = event.name
    shapes = event.input_shapes
    reads = _reads_host(event)
    if name == "aten::index_put_" and len(shapes) > 2 and shapes[2] == [] and not reads:
        return "scalar_index_put"  # t[idx] = number: a 0-d CPU value copied to t's device
    if not reads:
        return None
    return _KINDS.get(name, name.removeprefix("aten::"))


class OpCounter:
    """Count the ATen operators of a ``with`` block, and the sync-prone ones.

    Reads a ``torch.profiler`` trace of the block (see the module docstring): the forward
    operators, the backward's (autograd's events, in this thread on a CPU and in its
    device thread on a GPU), an optimiser's, a metric's, on every thread of the process.
    A multi-tensor (``_foreach_*``) operator counts once, as it launches once per chunk of
    tensors on a GPU. Operators that only make a view (``view``, ``t``, ``expand``,
    ``detach``...) are counted in [`views`][] as well: they launch no kernel.

    Attributes:
        ops: Operators dispatched.
        views: Of them, those that only make a view of their input.
        by_name: ``Counter`` of operator names (``aten::add``...).
        syncs: ``Counter`` of sync-prone calls by kind (``item``, ``nonzero``,
            ``bool_mask_index``, ``masked_select``, ``tolist``, ``cpu``, ...).
        parts: The counts of each [`scope`][] label (innermost wins), a [`Tally`][]
            each; ``""`` outside every scope (autograd's backward: ``"backward"``).
    """

    def __init__(self) -> None:
        self.ops = 0
        self.views = 0
        self.by_name: Counter[str] = Counter()
        self.syncs: Counter[str] = Counter()
        self.parts: dict[str, Tally] = {}
        activities = [ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(ProfilerActivity.CUDA)
        self._profile = profile(activities=activities, record_shapes=True, with_stack=True)

    @property
    def total_syncs(self) -> int:
        """All sync-prone calls counted."""
        return sum(self.syncs.values())

    @property
    def launches(self) -> int:
        """Operators that are not views."""
        return self.ops - self.views

    def __enter__(self) -> OpCounter:
        self._profile.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._profile.__exit__(*exc)
        for event in self._profile.events():
            if event.cpu_parent is None:
                self._walk(event, "")

    def _tally(self, part: str) -> Tally:
        return self.parts.setdefault(part, Tally())

    def _sync(self, part: str, kind: str) -> None:
        self.syncs[kind] += 1
        self._tally(part).syncs[kind] += 1

    def _walk(self, event: Any, part: str) -> None:
        name = event.name
        if name.startswith(SCOPE):
            part = name[len(SCOPE) :]
        elif name.startswith("autograd::engine::") and not part:
            part = "backward"
        elif name.startswith("aten::"):
            tally = self._tally(part)
            self.ops += 1
            tally.ops += 1
            if is_view(name):
                self.views += 1
                tally.views += 1
            self.by_name[name] += 1
            kind = _sync_kind(event)
            if kind is not None:
                self._sync(part, kind)
            return  # the operators it runs are its own
        elif name.startswith("cuda") and name in _HOST_READS:
            self._sync(part, "synchronize")
        elif event.is_python_function:
            if name.startswith("torch/cuda/__init__.py") and name.endswith(": synchronize"):
                self._sync(part, "synchronize")
            for prefix, kind in _PYTHON_READS.items():
                if name.startswith(prefix):
                    self._sync(part, kind)
        for child in event.cpu_children:
            self._walk(child, part)


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


__all__ = ["OpCounter", "PythonCallCounter", "Tally", "is_view", "scope"]
