"""A checkpoint's optimizer groups on resume: checked against this run's, and this run's
typed hyper-parameters laid over them.

Lightning restores ``optimizer_states`` with ``Optimizer.load_state_dict``, which refuses
state of another shape with a raw ``ValueError`` after the run has set itself up (a
method's parameter groups changed since the checkpoint was written: BayesNCL's gating head
got groups of its own). ``ncl-cli`` checks them when a resumed fit starts, before Lightning
loads their state ([`OptimizerGroupsCheck`][]), and puts values typed on the command line
into the restored state once it is loaded ([`ResumeOverrides`][]).
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

from lightning.pytorch.callbacks import Callback
from torch import nn
from torch.optim import Optimizer

from ncl_lightning.checkpoints.check import CheckpointError
from ncl_lightning.checkpoints.record import RECORD_KEY, class_path, same_class


def saved_group_sizes(ckpt: dict[str, Any]) -> list[list[int]] | None:
    """Per saved optimizer, the number of parameters of each group (``None``: the
    checkpoint holds no optimizer state, e.g. a weights-only save)."""
    states = ckpt.get("optimizer_states")
    if not isinstance(states, list) or not states:
        return None
    sizes = []
    for state in states:
        groups = state.get("param_groups") if isinstance(state, dict) else None
        if not isinstance(groups, list):
            return None  # not a torch optimizer's state: left to Lightning
        sizes.append([len(group.get("params", ())) for group in groups])
    return sizes


def _fresh_fit(model: nn.Module, path: str | Path) -> str:
    """How to start a new fit from the checkpoint's weights alone (new optimizer and
    schedule): ``--new_run true`` restores the optimizer state as well."""
    if "pretrained" in inspect.signature(type(model).__init__).parameters:
        return f"drop --ckpt_path and pass --model.init_args.pretrained {path}"
    return f"in Python: trainer.fit(ncl_lightning.load_method({str(path)!r}).train(), datamodule)"


def _remedy(model: nn.Module, path: str | Path) -> str:
    """What to do instead of resuming state that does not fit."""
    return (
        "--new_run true restores the optimizer state too; finish that run with the "
        "ncl-lightning version that wrote it, or start a new fit from its weights (new "
        f"optimizer and schedule): {_fresh_fit(model, path)}"
    )


def check_optimizer_groups(
    saved: list[list[int]], optimizers: list[Optimizer], model: nn.Module, path: str | Path
) -> None:
    """Refuse, in one line, optimizer state whose groups do not fit ``optimizers``.

    Args:
        saved: [`saved_group_sizes`][] of the checkpoint.
        optimizers: The optimizers the state is loaded into (Lightning pairs them with
            the saved states in order).
        model: The module (its class is named, and decides the remedy given).
        path: The checkpoint file (``ckpt_path``).

    Raises:
        CheckpointError: A different number of groups, or of parameters in a group, as
            ``Optimizer.load_state_dict`` would refuse.
    """
    for index, (sizes, optimizer) in enumerate(zip(saved, optimizers, strict=False)):
        now = [len(group["params"]) for group in optimizer.param_groups]
        if sizes == now:
            continue
        which = f"optimizer {index}" if len(saved) > 1 else "the optimizer"
        raise CheckpointError(
            f"ckpt_path: {path} holds state for {which} with {len(sizes)} parameter groups "
            f"of sizes {sizes}, but {type(model).__name__} now builds {len(now)} of sizes "
            f"{now} (its optimizer groups changed since the checkpoint was written), so the "
            f"fit cannot resume it; {_remedy(model, path)}",
            key="ckpt_path",
        )


class OptimizerGroupsCheck(Callback):
    """Refuse, in one line at ``on_fit_start`` (before Lightning loads the state and fails
    with torch's ``ValueError`` or ``KeyError``), a resumed fit whose optimizer state does
    not fit the optimizer class (the checkpoint record's; in a record written before
    2026-11-29, the ``optimizer`` class path of its hyper-parameters) or the parameter groups
    the module builds now.

    Args:
        ckpt: The checkpoint resumed (only its groups' sizes are kept).
        path: Its file, named in the refusal.
    """

    def __init__(self, ckpt: dict[str, Any], path: str | Path) -> None:
        self.saved = saved_group_sizes(ckpt)
        self.classes = (ckpt.get(RECORD_KEY) or {}).get("optimizers")
        if self.classes is None:  # a record before 2026-11-29: the config's optimizer class
            spec = (ckpt.get("hyper_parameters") or {}).get("optimizer")
            named = spec.get("class_path") if isinstance(spec, dict) else None
            self.classes = [named] if isinstance(named, str) else None
        self.path = str(path)

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        for saved, optimizer in zip(self.classes or [], trainer.optimizers, strict=False):
            if not same_class(saved, class_path(type(optimizer))):
                raise CheckpointError(
                    f"ckpt_path: {self.path} holds the state of a {saved} optimizer, but this "
                    f"fit builds a {class_path(type(optimizer))} (model.init_args.optimizer "
                    "differs from the run's), so it cannot resume it; resume with the run's "
                    "optimizer, or start a new fit from its weights (new optimizer and "
                    f"schedule): {_fresh_fit(pl_module, self.path)}",
                    key="ckpt_path",
                )
        if self.saved is not None:
            check_optimizer_groups(self.saved, list(trainer.optimizers), pl_module, self.path)


class ResumeOverrides(Callback):
    """After Lightning restores a checkpoint's optimiser state, put back this run's
    optimiser hyper-parameters (a fresh ``configure_optimizers()``'s); the learning rate
    keeps its place in the schedule (``lr × new base / checkpoint base``). Installed by
    ``ncl-cli`` only when typed values differ, so a plain resume stays exact."""

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
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
            if hasattr(config.scheduler, "base_lrs"):
                groups = config.scheduler.optimizer.param_groups
                config.scheduler.base_lrs = [g.get("initial_lr", g["lr"]) for g in groups]


def _optimizers(configured: Any) -> list[Optimizer]:
    """The optimisers in whatever ``configure_optimizers`` returned."""
    if isinstance(configured, Optimizer):
        return [configured]
    if isinstance(configured, dict):
        return [configured["optimizer"]]
    if isinstance(configured, list | tuple):
        if len(configured) == 2 and isinstance(configured[0], list | tuple):
            return _optimizers(list(configured[0]))
        return [o for item in configured for o in _optimizers(item)]
    return []
