"""Resuming with a fix: what this run's command line types wins over the hyper-parameters
stored in the checkpoint.

Lightning's CLI applies a ``--ckpt_path`` checkpoint's hyper-parameters over the parsed
config, so a run resumed from ``last-finite.ckpt`` with the fix its error suggests
(``--model.init_args.nonfinite_loss skip``, a lower learning rate) would train with the
checkpoint's values again. ``ncl-cli`` keeps Lightning's merge for what the user did not
type (a bare ``ncl-cli test --ckpt_path x.ckpt`` rebuilds the trained model; a config
file's differing values are kept from the checkpoint, see
[`cli_resume`][ncl_lightning.runtime.cli_resume]) and puts back every value typed on the command
line ([`overlay_explicit`][]), saying once which ones differ from the checkpoint's.
Lightning then restores the optimiser's state, whose parameter groups carry the
checkpoint's learning rate, momentum and weight decay; [`ResumeOverrides`][]
re-applies this run's values after that restore.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import lightning as L
import torch
from jsonargparse import Namespace
from lightning.pytorch.callbacks import Callback

Change = tuple[str, Any, Any]  # (dotted key, checkpoint's value, this run's value)


def overlay_explicit(target: Namespace, explicit: Namespace, prefix: str = "") -> list[Change]:
    """Put every value of ``explicit`` into ``target`` (in place).

    A nested object whose ``class_path`` differs is replaced whole, not merged key by key
    (the arguments of one class do not fit another).

    Args:
        target: The merged config (checkpoint hyper-parameters over the parsed config).
        explicit: What the user gave (``parse_args(..., defaults=False)``).
        prefix: Dotted key of ``target`` in the whole config, for the report.

    Returns:
        The values that differed: ``(key, checkpoint's value, this run's value)``.
    """
    changes: list[Change] = []
    for key, value in vars(explicit).items():
        current = target.get(key) if isinstance(target, Namespace) else None
        name = f"{prefix}{key}"
        same_class = not isinstance(value, Namespace) or value.get("class_path") in (
            None,
            current.get("class_path") if isinstance(current, Namespace) else None,
        )
        if isinstance(value, Namespace) and isinstance(current, Namespace) and same_class:
            changes += overlay_explicit(current, value, f"{name}.")
            continue
        if _plain(current) != _plain(value):
            changes.append((name, _plain(current), _plain(value)))
        target[key] = value
    return changes


def _plain(value: Any) -> Any:
    return value.as_dict() if isinstance(value, Namespace) else value


def describe(changes: Sequence[Change]) -> str:
    """``key: run's value (checkpoint: value), ...`` for the one-line report."""
    return ", ".join(f"{key}={new!r} (checkpoint: {old!r})" for key, old, new in changes)


class ResumeOverrides(Callback):
    """After Lightning restores a checkpoint's optimiser state, put back this run's
    optimiser hyper-parameters.

    A fresh ``configure_optimizers()`` says what this run configured. Every parameter
    group takes its hyper-parameters (momentum, weight decay, ...); the learning rate
    keeps the schedule's position: ``lr ← lr × new base / checkpoint base``, and the
    schedulers' ``base_lrs`` become the new bases. Installed by ``ncl-cli`` only when the
    resumed run's model arguments differ from the checkpoint's, so a plain resume stays
    exact.
    """

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        fresh = _optimizers(pl_module.configure_optimizers())
        for live, new in zip(trainer.optimizers, fresh, strict=False):
            for group, configured in zip(live.param_groups, new.param_groups, strict=False):
                old_base = group.get("initial_lr", group["lr"])
                new_base = configured.get("initial_lr", configured["lr"])
                for key, value in configured.items():
                    if key not in ("params", "lr", "initial_lr"):
                        group[key] = value
                if old_base:
                    group["lr"] = group["lr"] * new_base / old_base
                if "initial_lr" in group:
                    group["initial_lr"] = new_base
        for config in trainer.lr_scheduler_configs:
            scheduler = config.scheduler
            if hasattr(scheduler, "base_lrs"):
                groups = scheduler.optimizer.param_groups
                scheduler.base_lrs = [g.get("initial_lr", g["lr"]) for g in groups]


def _optimizers(configured: Any) -> list[torch.optim.Optimizer]:
    """The optimisers in whatever ``configure_optimizers`` returned."""
    if isinstance(configured, torch.optim.Optimizer):
        return [configured]
    if isinstance(configured, dict):
        return [configured["optimizer"]]
    if isinstance(configured, list | tuple):
        if len(configured) == 2 and isinstance(configured[0], list | tuple):
            return _optimizers(list(configured[0]))
        return [o for item in configured for o in _optimizers(item)]
    return []


__all__ = ["ResumeOverrides", "describe", "overlay_explicit"]
