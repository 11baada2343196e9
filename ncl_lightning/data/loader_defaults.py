"""How many loader workers a training process gets by default, and the one clause the
batch line prints about its loader (workers and the rule behind them, pinned memory,
persistent workers, prefetch)."""

from __future__ import annotations

import os
from typing import Any, Literal

import torch

AugmentOn = Literal["cpu", "device"]

DEVICE_AUGMENT_WORKERS = 2  # auto workers with augment_on: device and in-memory images
TORCH_PREFETCH = 2  # DataLoader's batches loaded ahead per worker when prefetch_factor is None


def available_cpus() -> int:
    """CPU cores this process may run on: its affinity mask (``os.sched_getaffinity``,
    which ``taskset``, Slurm and most launchers set), all the machine's where unknown."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def local_processes(devices: object = None) -> int:
    """Training processes on this machine: ``LOCAL_WORLD_SIZE`` (set by ``torchrun``) or
    ``devices`` (the trainer's devices per machine, when an int), the larger, at least 1."""
    devices = devices if isinstance(devices, int) else 1
    return max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")), devices)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}{'es' if word.endswith('s') else 's'}"


def auto_workers(
    augment_on: AugmentOn, devices: object = None, reads_files: bool = False
) -> tuple[int, str]:
    """[`default_workers`][] and the rule that gave it, in words (``auto: 16 CPUs / 1
    process - 1``) for [`MultiViewDataModule.loader_summary`][]."""
    cpus, local = available_cpus(), local_processes(devices)
    share = cpus // local - 1
    workers = max(1, share)
    rule = f"auto: {_plural(cpus, 'CPU')} / {_plural(local, 'process')} - 1"
    if augment_on == "device" and reads_files:  # the workers decode, the views are not theirs
        half = rule.replace("auto: ", "auto: half of ") + (", at least 1" if share < 2 else "")
        return max(1, share // 2), f"{half}: decode only with augment_on: device"
    if share < 1:
        rule += ", at least 1"
    if augment_on == "device" and workers > DEVICE_AUGMENT_WORKERS:
        return DEVICE_AUGMENT_WORKERS, f"auto: {DEVICE_AUGMENT_WORKERS} with augment_on: device"
    return workers, rule


def default_workers(
    augment_on: AugmentOn, devices: int | None = None, reads_files: bool = False
) -> int:
    """Loader workers of each training process when ``num_workers`` is ``None``.

    ``augment_on: cpu``: the CPUs this process may run on ([`available_cpus`][]) shared
    among the machine's training processes ([`local_processes`][]), less one for the
    training process, at least 1 (16 CPUs and one GPU: 15; the workers make the views).
    ``augment_on: device``: at most ``DEVICE_AUGMENT_WORKERS`` (2), the workers only index
    uint8 images or read encoded files; when they decode an image file per item
    (``reads_files``) half of the ``cpu`` count, at least 1, leaving the training process
    cores for its own host work.

    Args:
        augment_on: Where the training views are made.
        devices: The trainer's devices per machine, when known (``trainer.num_devices``;
            Lightning's own launcher sets no ``LOCAL_WORLD_SIZE``).
        reads_files: The loader decodes an image file per item.
    """
    return auto_workers(augment_on, devices, reads_files)[0]


def describe_loader(
    workers: int, rule: str, pinned: bool, persistent: bool, prefetch_factor: int | None
) -> str:
    """The effective loader settings in one clause: ``15 workers (auto: 16 CPUs / 1
    process - 1), pinned, persistent, prefetch 2``, or ``main process (num_workers: 0)``.

    Args:
        workers: ``num_workers`` of the loader.
        rule: Where that count came from (``configured`` or the automatic rule).
        pinned: Pinned host memory (already ``and torch.cuda.is_available()``).
        persistent: ``persistent_workers`` as configured (only effective with workers).
        prefetch_factor: As configured (``None``: torch's default, 2).
    """
    if workers == 0:
        parts = ["main process (num_workers: 0)"]
    else:
        parts = [f"{_plural(workers, 'worker')} ({rule})"]
    if pinned:
        parts.append("pinned")
    if workers > 0:
        if persistent:
            parts.append("persistent")
        parts.append(f"prefetch {prefetch_factor or TORCH_PREFETCH}")
    return ", ".join(parts)


def loader_options(
    workers: int, pin_memory: bool, persistent: bool, prefetch_factor: int | None
) -> dict[str, Any]:
    """``DataLoader`` keyword arguments for ``workers`` processes: memory pinned only where
    CUDA is, persistent workers and ``prefetch_factor`` only with workers (torch refuses a
    prefetch factor without them). Denormals are not flushed in the workers: a worker's
    views must equal the main process' (the blurs have no denormal taps instead)."""
    return {
        "num_workers": workers,
        "pin_memory": pin_memory and torch.cuda.is_available(),
        "persistent_workers": persistent and workers > 0,
        "prefetch_factor": prefetch_factor if workers > 0 else None,
    }
