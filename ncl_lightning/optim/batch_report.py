"""The batch a run actually trains with ([`batch_layout`][]), and the line a run prints
at the start of ``fit`` about it and the learning rates scaled from it
([`describe_batch`][]: the linear scaling rule of Goyal et al., 2017, as SimCLR and
solo-learn use it)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ncl_lightning.foundation.errors import ConfigError

REFERENCE_BATCH = 256


@dataclass(frozen=True)
class BatchLayout:
    """How the samples of one optimiser update are spread.

    Attributes:
        nodes: Machines (``trainer.num_nodes``).
        devices: Processes per machine (``trainer.num_devices``).
        per_device: Samples each process loads per step (``None``: unknown, a loader
            without an integer ``batch_size`` and no module ``batch_size``).
        accumulation: Steps per optimiser update (``trainer.accumulate_grad_batches``).
        batch_scope: The DataModule's ``batch_scope`` (``None`` when it has none).
    """

    nodes: int
    devices: int
    per_device: int | None
    accumulation: int = 1
    batch_scope: str | None = None

    @property
    def world(self) -> int:
        """Processes of the run."""
        return self.nodes * self.devices

    @property
    def global_batch(self) -> int:
        """Samples of one step over all processes: what a gathered contrastive loss sees."""
        if self.per_device is None:
            raise ConfigError("the per-device batch size is unknown", key="batch_size")
        return self.per_device * self.world

    @property
    def per_update(self) -> int:
        """Samples of one optimiser update: the learning rate's scale."""
        return self.global_batch * self.accumulation


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def batch_layout(trainer: Any, fallback: int | None, required: bool) -> BatchLayout:
    """The layout of ``trainer``'s fit (call after the training loader is built, e.g.
    after ``trainer.estimated_stepping_batches``).

    The per-device batch is, in order: the training loader's ``batch_size`` (the batch
    actually loaded), the attached DataModule's ``per_device_batch_size`` (its
    ``batch_size`` split by ``batch_scope``) or ``batch_size``, then ``fallback``.

    Args:
        trainer: The fitting trainer.
        fallback: The module's per-device ``batch_size``.
        required: The batch size must be known (``scale_lr``).

    Raises:
        ConfigError: ``required`` and no integer batch size is known.
    """
    per_device = _int_or_none(getattr(trainer.train_dataloader, "batch_size", None))
    data = getattr(trainer, "datamodule", None)
    for name in ("per_device_batch_size", "batch_size"):
        if per_device is None:
            per_device = _int_or_none(getattr(data, name, None))
    if per_device is None:
        per_device = fallback
    if per_device is None and required:
        raise ConfigError(
            "scale_lr needs the per-device batch size, and neither the training loader "
            "(a batch_sampler?), a DataModule nor the module gives one: pass "
            "batch_size=<per-device batch> to the module, or scale_lr=False",
            key="batch_size",
        )
    return BatchLayout(
        nodes=trainer.num_nodes,
        devices=trainer.num_devices,
        per_device=per_device,
        accumulation=trainer.accumulate_grad_batches,
        batch_scope=getattr(data, "batch_scope", None),
    )


def _count(n: int, word: str) -> str:
    plural = word + ("es" if word.endswith("s") else "s")
    return f"{n} {word}" if n == 1 else f"{n} {plural}"


def _rates(values: Sequence[float]) -> str:
    return ", ".join(f"{value:.6g}" for value in values)


def _kept(unscaled: Sequence[float]) -> str:
    """The clause of the rates ``scale_lr`` leaves alone ('' when none)."""
    kept = list(dict.fromkeys(unscaled))
    if not kept:
        return ""
    if len(kept) == 1 and len(unscaled) == 1:
        return f"; learning rate {_rates(kept)} not scaled (its group sets scale_lr false)"
    word = "learning rate" if len(kept) == 1 else "learning rates"
    return f"; {word} {_rates(kept)} not scaled (their groups set scale_lr false)"


def describe_batch(
    layout: BatchLayout,
    lrs: Sequence[tuple[float, float]],
    scaled: bool,
    loader: str | None = None,
    unscaled: Sequence[float] = (),
) -> str:
    """What a run trains with, in one line (two with gradient accumulation).

    Args:
        layout: The device layout and batch ([`batch_layout`][]).
        lrs: ``(configured, peak)`` learning rate of each parameter group the scaling
            applies to; distinct pairs are shown once, in order.
        scaled: Whether the rates were scaled by ``layout.per_update / 256``.
        loader: The training loader's settings (the DataModule's ``loader_summary()``),
            added as a last clause ``; loader: ...``; ``None`` (a DataModule without
            them, or loaders passed to ``fit``) adds nothing.
        unscaled: With ``scaled``, the rates of the groups that keep their configured
            rate (``"scale_lr": False`` in the group, e.g. BayesNCL's gating head), shown
            apart in a clause ``; learning rate 0.1 not scaled (its group sets scale_lr
            false)``; not in ``lrs``.

    Returns:
        E.g. ``Batch: 2 processes (1 node x 2 devices) x 128 per device = global batch 256
        (batch_scope: global); learning rate 0.4 -> 0.4 (x 256/256, lr scaled by global
        batch / 256); loader: 7 workers (auto: 16 CPUs / 2 processes - 1), pinned,
        persistent, prefetch 2``.
    """
    scope = f" (batch_scope: {layout.batch_scope})" if layout.batch_scope else ""
    pairs = list(dict.fromkeys(lrs))
    word = "learning rate" if len(pairs) == 1 else "learning rates"
    before = _rates([pair[0] for pair in pairs])
    processes = (
        f"{_count(layout.world, 'process')} ({_count(layout.nodes, 'node')} x "
        f"{_count(layout.devices, 'device')})"
    )
    tail = f"; loader: {loader}" if loader else ""
    if layout.per_device is None:  # only without scaling: batch_layout refuses otherwise
        return (
            f"Batch: {processes}, per-device batch unknown (the training loader has no "
            f"batch_size); {word} {before} (not scaled: scale_lr is false){tail}"
        )
    line = (
        f"Batch: {processes} x {layout.per_device} per device = global batch "
        f"{layout.global_batch}{scope}"
    )
    if scaled:
        basis = "global batch" if layout.accumulation == 1 else "samples per update"
        after = _rates([pair[1] for pair in pairs])
        if pairs:
            line += (
                f"; {word} {before} -> {after} (x {layout.per_update}/{REFERENCE_BATCH}, "
                f"lr scaled by {basis} / {REFERENCE_BATCH})"
            )
        line += _kept(unscaled)
    else:
        line += f"; {word} {before} (not scaled: scale_lr is false)"
    line += tail
    if layout.accumulation > 1:
        line += (
            f"\ngradient accumulation {layout.accumulation}: {layout.per_update} samples per "
            f"update, but each contrastive loss sees only the {layout.global_batch} of one "
            "step (accumulation does not add negatives)"
        )
    return line
