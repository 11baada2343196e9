"""Which package code one training step runs, and where the InfoNCE temperature travels.

Runs ``ncl-cli fit`` (``ncl_lightning.runtime.cli.cli_main``) on the digits demo config
for a few steps, CPU, no logger, into a temporary folder, and traces with ``sys.setprofile``:

* ``step`` (default): from the callbacks' ``on_train_batch_start`` to the module's
  ``on_train_batch_end`` of one steady-state batch (``--batch``, default the 3rd): the
  package functions called (``module:qualname`` and call count), the distinct package
  files (and how many times each is entered from another file), and the file-to-file hops
  (distinct ``caller file -> callee file`` pairs, the caller being the nearest package frame).
* ``temperature``: from the start of ``cli_main`` to the end of the first training batch,
  the package files whose functions hold the config's temperature (a distinctive value set
  on the command line) in a local or argument (one level into dicts, namespaces and
  sequences), or name ``temperature``/``tau`` in their code; and, as a complement, the
  package files that mention ``temperature`` at all (grep).

Usage: ``python benchmarks/step_trace.py [step|temperature] [--batch N] [-- extra args]``.
A measuring tool, not part of the package (nothing imports it).
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "ncl_lightning"
CONFIG = ROOT / "configs" / "demo" / "digits_ncl.yaml"
TEMPERATURE = 0.2345678  # distinctive: found by value in frames
PREFIX = str(PACKAGE) + "/"


def package_file(frame: FrameType | None) -> str | None:
    """The package-relative file of ``frame``, or ``None`` outside the package."""
    if frame is None:
        return None
    name = frame.f_code.co_filename
    return name[len(PREFIX) :] if name.startswith(PREFIX) else None


def caller_file(frame: FrameType) -> str | None:
    """The file of the nearest package frame that called ``frame``."""
    back = frame.f_back
    while back is not None:
        found = package_file(back)
        if found is not None:
            return found
        back = back.f_back
    return None


def qualname(frame: FrameType) -> str:
    module = frame.f_globals.get("__name__", "?")
    return f"{module}:{frame.f_code.co_qualname}"


class StepProfile:
    """Collects package calls while active."""

    def __init__(self) -> None:
        self.functions: Counter[str] = Counter()
        self.files: Counter[str] = Counter()
        self.entries: Counter[str] = Counter()  # calls into a file from another file
        self.hops: Counter[tuple[str, str]] = Counter()

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        here = package_file(frame)
        if here is None:
            return
        self.functions[qualname(frame)] += 1
        self.files[here] += 1
        there = caller_file(frame)
        if there != here:
            self.entries[here] += 1
            if there is not None:
                self.hops[(there, here)] += 1

    def report(self, batch: int) -> str:
        lines = [f"# one training step (batch index {batch}): package functions called"]
        lines += [f"{n:5d}  {name}" for name, n in sorted(self.functions.items())]
        lines.append("\n# package files: calls, entries from another file")
        lines += [f"{self.files[f]:5d} {self.entries[f]:4d}  {f}" for f in sorted(self.files)]
        lines.append("\n# file-to-file hops (caller -> callee): calls")
        lines += [f"{n:5d}  {a} -> {b}" for (a, b), n in sorted(self.hops.items())]
        lines.append(
            f"\nSUMMARY: {len(self.functions)} package functions, {len(self.files)} package "
            f"files, {len(self.hops)} file-to-file hops "
            f"({sum(self.functions.values())} calls, {sum(self.entries.values())} file entries)"
        )
        return "\n".join(lines)


def holds(value: Any, depth: int = 2) -> bool:
    """Whether ``value`` is the temperature, or holds it one or two levels down."""
    if isinstance(value, float):
        return value == TEMPERATURE
    if type(value).__name__ == "Tensor":
        try:
            return value.numel() == 1 and abs(float(value) - TEMPERATURE) < 1e-6
        except Exception:  # a meta or odd tensor
            return False
    if depth == 0:
        return False
    if isinstance(value, dict):
        return any(holds(v, depth - 1) for v in list(value.values())[:200])
    if isinstance(value, list | tuple):
        return any(holds(v, depth - 1) for v in value[:200])
    if type(value).__name__ == "Namespace":
        return any(holds(v, depth - 1) for v in vars(value).values())
    return False


NAMED = re.compile(r"temperature|\btau\b")


class TemperatureProfile:
    """Package files whose functions see the temperature."""

    def __init__(self) -> None:
        self.by_value: dict[str, set[str]] = {}
        self.by_name: dict[str, set[str]] = {}

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event not in ("call", "return"):
            return
        here = package_file(frame)
        if here is None:
            return
        code = frame.f_code
        if any(NAMED.search(n) for n in (*code.co_names, *code.co_varnames)):
            self.by_name.setdefault(here, set()).add(qualname(frame))
        local = {k: v for k, v in frame.f_locals.items() if k != "self"}
        if any(holds(v) for v in local.values()):
            self.by_value.setdefault(here, set()).add(qualname(frame))

    def report(self) -> str:
        grep = sorted(
            str(p.relative_to(PACKAGE))
            for p in PACKAGE.rglob("*.py")
            if "temperature" in p.read_text(encoding="utf-8")
        )
        traced = sorted(set(self.by_value) | set(self.by_name))
        lines = ["# files whose functions held the temperature value (config -> first step)"]
        for f in sorted(self.by_value):
            lines.append(f"  {f}: {', '.join(sorted(self.by_value[f]))}")
        lines.append("\n# files whose running functions name temperature/tau in their code")
        for f in sorted(self.by_name):
            lines.append(f"  {f}: {', '.join(sorted(self.by_name[f]))}")
        lines.append("\n# grep: package files mentioning 'temperature' (* = ran on the path)")
        lines += [f"  {'*' if f in traced else ' '} {f}" for f in grep]
        lines.append(
            f"\nSUMMARY: temperature value passes through {len(self.by_value)} files; "
            f"{len(traced)} files on the path touch it by value or name; "
            f"{len(grep)} package files mention it"
        )
        return "\n".join(lines)


def fit_args(out: Path, steps: int, extra: list[str]) -> list[str]:
    return [
        "fit", "--config", str(CONFIG),
        "--trainer.default_root_dir", str(out),
        "--trainer.logger", "false",
        "--trainer.max_steps", str(steps),
        "--trainer.max_epochs", "1",
        "--trainer.enable_progress_bar", "false",
        "--trainer.limit_val_batches", "0",
        "--model.init_args.temperature", str(TEMPERATURE),
        *extra,
    ]  # fmt: skip


def trace_step(batch: int, extra: list[str]) -> str:
    from lightning.pytorch.trainer import call

    from ncl_lightning.runtime.cli import cli_main

    profile = StepProfile()
    callback_hooks, module_hook = call._call_callback_hooks, call._call_lightning_module_hook

    def callbacks(trainer: Any, name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "on_train_batch_start" and args[1] == batch:
            sys.setprofile(profile)
        return callback_hooks(trainer, name, *args, **kwargs)

    def module(trainer: Any, name: str, *args: Any, **kwargs: Any) -> Any:
        try:
            return module_hook(trainer, name, *args, **kwargs)
        finally:
            if name == "on_train_batch_end" and args[2] == batch:
                sys.setprofile(None)

    call._call_callback_hooks, call._call_lightning_module_hook = callbacks, module
    try:
        with tempfile.TemporaryDirectory() as out:
            cli_main(fit_args(Path(out), batch + 2, extra))
    finally:
        sys.setprofile(None)
        call._call_callback_hooks, call._call_lightning_module_hook = callback_hooks, module_hook
    if not profile.functions:
        return f"no batch with index {batch} was traced"
    return profile.report(batch)


def trace_temperature(extra: list[str]) -> str:
    from lightning.pytorch.trainer import call

    from ncl_lightning.runtime.cli import cli_main

    profile = TemperatureProfile()
    module_hook = call._call_lightning_module_hook

    def module(trainer: Any, name: str, *args: Any, **kwargs: Any) -> Any:
        try:
            return module_hook(trainer, name, *args, **kwargs)
        finally:
            if name == "on_train_batch_end":
                sys.setprofile(None)

    call._call_lightning_module_hook = module
    try:
        with tempfile.TemporaryDirectory() as out:
            args = fit_args(Path(out), 1, extra)
            sys.setprofile(profile)
            cli_main(args)
    finally:
        sys.setprofile(None)
        call._call_lightning_module_hook = module_hook
    return profile.report()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", nargs="?", choices=["step", "temperature"], default="step")
    parser.add_argument("--batch", type=int, default=2, help="batch index traced (step mode)")
    parser.add_argument("extra", nargs="*", help="more ncl-cli fit arguments (after --)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    if args.mode == "step":
        print(trace_step(args.batch, args.extra))
    else:
        print(trace_temperature(args.extra))


if __name__ == "__main__":
    main()
