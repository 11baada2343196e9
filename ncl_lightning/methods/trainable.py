"""The one training base of the package: :class:`TrainableModule`.

:class:`~ncl_lightning.methods.SSLMethod` and :class:`~ncl_lightning.methods.Classifier`
subclass it directly. It holds what every trainable module shares: the checks of the
common arguments, the hyper-parameters, the optimiser's parameter groups, learning rates
scaled by ``global batch / 256`` (Goyal et al., 2017; SimCLR) with a per-step linear
warmup then cosine decay (SimCLR, NCL), and the finiteness hook of the training step.

The cross-cutting behaviour is in callbacks of :mod:`ncl_lightning.runtime`, which read
this module's typed attributes (``nonfinite_loss``, ``grad_norm_limit``,
``channels_last``, ``torch_compile``, ``compile_mode``): ``ncl-cli`` installs them
(:func:`ncl_lightning.default_callbacks`), and :meth:`TrainableModule.configure_callbacks`
adds the ones a plain ``Trainer`` lacks, so nothing is lost without the CLI.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Iterable
from typing import Any, ClassVar

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.cli import OptimizerCallable
from lightning.pytorch.utilities import rank_zero_info
from torch import Tensor

from ncl_lightning.checkpoints.record import RECORD_KEY, make_record, spec_of
from ncl_lightning.foundation.errors import ConfigError, UsageError
from ncl_lightning.foundation.internals import build_train_loader, built_by_cli, record_hparams
from ncl_lightning.foundation.validation import check_at_least, check_choice, check_range
from ncl_lightning.optim import decay_param_groups, warmup_cosine, warmup_step
from ncl_lightning.optim import scale_lr as scaled
from ncl_lightning.optim.batch_report import batch_layout, describe_batch
from ncl_lightning.runtime.components import missing_callbacks
from ncl_lightning.runtime.finite_checks import zero_loss
from ncl_lightning.runtime.guard import (
    NONFINITE_CHOICES,
    NonFiniteGuard,
    NonFiniteLoss,
    check_grad_norm_limit,
)
from ncl_lightning.runtime.speed_switches import CompileMode, check_compile_mode
from ncl_lightning.runtime.subclass_defaults import check_declared_defaults
from ncl_lightning.runtime.trainer_checks import check_sync_batchnorm

# Arguments every model takes from the DataModule attribute of the same name: ncl-cli
# links them (``data.<name>`` -> ``model.init_args.<name>``), and a module built in
# Python with ``None`` takes them at ``fit`` (:meth:`TrainableModule.setup`).
DATA_LINKED: tuple[str, ...] = ("num_classes", "batch_size")


class TrainableModule(L.LightningModule):
    """Hyper-parameters, parameter groups, warmup-cosine optimisation and the finiteness
    hook shared by every trainable module of the package.

    Subclasses pass these arguments on from their own ``__init__`` (which keeps them in
    its signature, so ``model.init_args`` keys and their defaults stay the subclass's).

    Args:
        batch_size: The data's ``batch_size`` (CLI-linked; from Python it can stay
            ``None``). The learning rate is scaled by the batch the training loader loads,
            else the attached DataModule's; this value only when neither gives one.
        optimizer: Callable building the optimiser from parameter groups (``None``: the
            subclass's :meth:`default_optimizer`).
        warmup_epochs: Linear warmup length in epochs (fractions allowed).
        min_lr_ratio: Final learning rate of the cosine schedule, relative to the peak.
        scale_lr: Multiply every learning rate by ``global batch / 256``.
        exclude_bias_n_norm: No weight decay and no LARS adaptation for biases and norms.
        channels_last: NHWC memory format for the model and its image inputs.
        torch_compile: Compile the modules named in :attr:`compile_targets` with
            ``torch.compile``.
        compile_mode: ``torch.compile`` mode (``default``, ``reduce-overhead``,
            ``max-autotune``).
        nonfinite_loss: On a NaN/Inf loss, ``stop`` (save ``last-finite.ckpt`` and raise
            :class:`~ncl_lightning.foundation.errors.NonFiniteLossError`) or ``skip`` the batch; the
            same for non-finite gradients or BatchNorm statistics with a finite loss.
        grad_norm_limit: Treat a step whose gradient norm (over every parameter, before
            any clipping) exceeds this like a non-finite one (``nonfinite_loss``); None
            (default): only non-finite gradients count. Not clipping: that is
            ``trainer.gradient_clip_val``.

    Attributes:
        compile_targets: Class value: the sub-modules ``torch_compile`` compiles; the loss
            and the logging stay eager. Subclasses add their heads.
        last_step_skipped: Whether the last optimiser step was a no-op (all its batches
            skipped for a non-finite value; set by the guard).
        lr_milestones: Epochs of a step decay by ``lr_gamma`` instead of the cosine
            (``None``: warmup-cosine); subclasses that offer it set both (the probes).
    """

    compile_targets: ClassVar[tuple[str, ...]] = ("backbone", "projector")
    last_step_skipped: bool = False
    lr_milestones: list[int] | None = None
    lr_gamma: float = 0.1

    def __init__(
        self,
        *,
        batch_size: int | None,
        optimizer: OptimizerCallable | None,
        warmup_epochs: float,
        min_lr_ratio: float,
        scale_lr: bool,
        exclude_bias_n_norm: bool,
        channels_last: bool,
        torch_compile: bool,
        compile_mode: CompileMode,
        nonfinite_loss: NonFiniteLoss,
        grad_norm_limit: float | None,
    ) -> None:
        super().__init__()
        check_declared_defaults(type(self), TrainableModule)  # defaults ncl-cli would ignore
        check_compile_mode(compile_mode)
        check_common_arguments(batch_size, warmup_epochs, min_lr_ratio)
        check_choice("nonfinite_loss", nonfinite_loss, NONFINITE_CHOICES)
        check_grad_norm_limit(grad_norm_limit)
        # Under ncl-cli the stored hparams are the parsed config (backbone and optimizer as
        # class_path dicts), so `load_from_checkpoint` rebuilds the module from the file
        # alone. Built from Python, the module objects are not put into the checkpoint's
        # hparams. The subclasses' __init__ arguments are collected too (Lightning walks
        # the __init__ frames).
        self.save_hyperparameters(ignore=[] if built_by_cli() else ["backbone", "optimizer"])
        self.optimizer_factory: OptimizerCallable = optimizer or self.default_optimizer
        self.batch_size = batch_size
        self.warmup_epochs = warmup_epochs
        self.min_lr_ratio = min_lr_ratio
        self.scale_lr = scale_lr
        self.exclude_bias_n_norm = exclude_bias_n_norm
        self.channels_last = channels_last
        self.torch_compile = torch_compile
        self.compile_mode: CompileMode = compile_mode
        self.nonfinite_loss: NonFiniteLoss = nonfinite_loss
        self.grad_norm_limit = grad_norm_limit
        self._own_guard: NonFiniteGuard | None = None  # used without a trainer

    @staticmethod
    def default_optimizer(params: Iterable) -> torch.optim.Optimizer:
        """The optimiser when none is configured; subclasses choose it."""
        raise NotImplementedError

    def param_groups(self) -> list[dict[str, Any]]:
        """Optimiser parameter groups; biases and norms without weight decay by default.
        Override to give new heads their own settings."""
        return decay_param_groups(self, self.exclude_bias_n_norm)

    def setup(self, stage: str) -> None:
        """At ``fit``, the :data:`DATA_LINKED` arguments left ``None`` (a module built in
        Python) take the attached DataModule's values, those ``ncl-cli`` links, recorded
        in the hyper-parameters the loggers and checkpoints keep."""
        super().setup(stage)
        if stage != "fit":
            return
        data = self.trainer.datamodule
        found = {
            name: getattr(data, name)
            for name in DATA_LINKED
            if name in self.hparams and self.hparams[name] is None
            and type(getattr(data, name, None)) is int
        }  # fmt: skip
        record_hparams(self, **found)
        self.batch_size = found.get("batch_size", self.batch_size)

    def configure_optimizers(self) -> dict[str, Any]:
        """The optimiser over :meth:`param_groups`, learning rates scaled by the global
        batch, and a per-step warmup-cosine schedule (step decay with ``lr_milestones``)."""
        return configure_warmup_cosine(
            self,
            self.optimizer_factory(self.param_groups()),
            scale_lr=self.scale_lr,
            batch_size=self.batch_size,
            warmup_epochs=self.warmup_epochs,
            min_lr_ratio=self.min_lr_ratio,
            milestones=self.lr_milestones,
            gamma=self.lr_gamma,
        )

    def check_trainer(self, trainer: L.Trainer) -> None:
        """What ``configure_optimizers`` and the strategy need of the trainer, checked
        before ``fit``: a finite schedule (``max_epochs`` or ``max_steps``), and
        ``sync_batchnorm`` only where ``SyncBatchNorm`` runs."""
        check_schedule_length(trainer.max_epochs, trainer.max_steps)
        check_sync_batchnorm(trainer)

    def configure_callbacks(self) -> list[Callback]:
        """The default run-time callbacks the trainer lacks (a user's own instance of a
        type is kept; ``ncl-cli`` has installed them all already)."""
        return missing_callbacks(self._trainer)

    def backbone_spec(self) -> dict[str, Any] | None:
        """``{"class_path", "init_args"}`` rebuilding ``self.backbone`` (checkpoint record),
        or ``None`` if unknown. Subclasses that load a pretrained backbone override it."""
        return spec_of(getattr(self, "backbone", None), self.hparams.get("backbone"))

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """The record's core (method class, backbone spec) for a save the
        :class:`~ncl_lightning.runtime.checkpoint_record.CheckpointRecord` callback did not see:
        Lightning calls no callback on a weights-only save, but calls this hook."""
        checkpoint.setdefault(RECORD_KEY, make_record(self, self.backbone_spec()))

    # -- finiteness ---------------------------------------------------------------------
    def nonfinite_guard(self) -> NonFiniteGuard:
        """The trainer's :class:`~ncl_lightning.runtime.guard.NonFiniteGuard`; without a
        trainer (a step called by hand), one owned by the module."""
        trainer = self._trainer
        if trainer is None:
            if self._own_guard is None:
                self._own_guard = NonFiniteGuard()
            return self._own_guard
        guards = [c for c in trainer.callbacks if isinstance(c, NonFiniteGuard)]
        if not guards:
            raise UsageError(
                f"{type(self).__name__}: no NonFiniteGuard among trainer.callbacks; train "
                "with trainer.fit (configure_callbacks adds it) or add "
                "ncl_lightning.default_callbacks() to the Trainer"
            )
        return guards[0]

    def loss_is_finite(self, loss: Tensor) -> bool:
        """``True`` when ``loss``, the buffers and the parameters are finite on every rank;
        otherwise stop (raises) or skip (``False``), per ``nonfinite_loss``.

        The training step calls it before logging anything::

            if not self.loss_is_finite(loss):  # raises under nonfinite_loss: stop
                return self.skipped_step_loss()

        Raises:
            NonFiniteLossError: See :meth:`NonFiniteGuard.check_loss
                <ncl_lightning.runtime.guard.NonFiniteGuard.check_loss>`.
        """
        return self.nonfinite_guard().check_loss(self, loss)

    def check_finite_later(self, loss: Tensor) -> bool:
        """:meth:`loss_is_finite` without a host sync: the guard judges this batch on the
        device and reads the verdict at the start of the next one (undoing the batch if
        needed); ``True`` under a trainer. Used as ``loss_is_finite``, with what a skipped
        batch must not change handed to :meth:`after_finite_step`
        (:meth:`NonFiniteGuard.check_loss_later
        <ncl_lightning.runtime.guard.NonFiniteGuard.check_loss_later>`)."""
        return self.nonfinite_guard().check_loss_later(self, loss)

    def after_finite_step(self, effect: Callable[[], None]) -> None:
        """Run ``effect`` once this batch is known to be finite (dropped if it is not)."""
        self.nonfinite_guard().after_finite(effect)

    def skipped_step_loss(self) -> Tensor:
        """What a skipped step returns: a zero loss connected to every trainable parameter
        (zero gradients, the same backward and all-reduce on every rank)."""
        return zero_loss(self)


def common_arguments(values: dict[str, Any]) -> dict[str, Any]:
    """The entries of ``values`` (a subclass ``__init__``'s ``locals()``) that
    :class:`TrainableModule` takes: what the bases pass on to it."""
    names = inspect.signature(TrainableModule.__init__).parameters
    return {name: values[name] for name in names if name != "self"}


def configure_warmup_cosine(
    module: L.LightningModule,
    optimizer: torch.optim.Optimizer,
    scale_lr: bool,
    batch_size: int | None,
    warmup_epochs: float,
    min_lr_ratio: float,
    milestones: list[int] | None = None,
    gamma: float = 0.1,
) -> dict[str, Any]:
    """Scale the optimiser's learning rates and attach a per-step warmup-cosine schedule
    (or, with ``milestones``, warmup then step decay).

    Args:
        module: The module being trained (its trainer gives world size and step count).
        optimizer: Optimiser over the module's parameter groups (peak rates at batch 256).
        scale_lr: Multiply every group's rate by ``per-device batch * world *
            accumulation / 256`` (samples per update / 256, Goyal et al., 2017).
        batch_size: The module's per-device batch size: used only when neither the
            training loader nor the attached DataModule gives an integer one
            (:func:`~ncl_lightning.optim.batch_report.batch_layout`).
        warmup_epochs: Linear warmup length in epochs (fractions allowed), converted with
            the steps of one epoch, also when ``max_steps`` ends the run
            (:func:`schedule_steps`).
        min_lr_ratio: Final rate of the cosine, relative to the peak; reached at the last
            step, ``trainer.estimated_stepping_batches``.
        milestones: Epochs at which the rate is multiplied by ``gamma``
            (:func:`~ncl_lightning.optim.warmup_step`) instead of the cosine.
        gamma: Step-decay factor.

    Prints once (rank zero) the devices, per-device and global batch, the peak rates and,
    when the DataModule has a ``loader_summary()``, its loader settings (workers, pinned
    memory, persistent workers, prefetch)
    (:func:`~ncl_lightning.optim.batch_report.describe_batch`).

    Returns:
        What ``configure_optimizers`` returns: optimiser and a step-interval scheduler.

    Raises:
        ConfigError: ``scale_lr`` and no batch size known (loader, DataModule or
            ``batch_size``); a run with neither ``max_epochs`` nor ``max_steps``.
    """
    trainer = module.trainer
    total, warmup, per_epoch = schedule_steps(trainer, warmup_epochs)  # builds the loader
    layout = batch_layout(trainer, batch_size, required=scale_lr)
    configured = [group["lr"] for group in optimizer.param_groups]
    if scale_lr:
        for group in optimizer.param_groups:
            group["lr"] = scaled(group["lr"], layout.per_update)
    peaks = [group["lr"] for group in optimizer.param_groups]
    summary = getattr(getattr(trainer, "datamodule", None), "loader_summary", None)
    loader = summary() if callable(summary) else None
    lrs = list(zip(configured, peaks, strict=True))
    rank_zero_info(describe_batch(layout, lrs, scale_lr, loader=loader))
    if milestones:
        if per_epoch is None:
            raise ConfigError(
                "lr_milestones are epochs, but the training loader has no length",
                key="lr_milestones",
            )
        scheduler = warmup_step(optimizer, warmup, per_epoch, milestones, gamma)
    else:
        scheduler = warmup_cosine(optimizer, warmup, total, min_lr_ratio)
    return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def check_schedule_length(max_epochs: int | None, max_steps: int | None) -> None:
    """The warmup-cosine schedule needs a finite run: ``trainer.max_epochs >= 1``, or
    ``trainer.max_steps >= 1`` with ``max_epochs`` -1 (what ``Trainer(max_steps=N)``
    sets)."""
    if max_epochs is not None and max_epochs >= 1:
        return
    if max_epochs in (None, -1) and max_steps is not None and max_steps >= 1:
        return
    raise ConfigError(
        "the warmup-cosine schedule needs a finite run: set trainer.max_epochs >= 1 or "
        f"trainer.max_steps >= 1 (got max_epochs={max_epochs}, max_steps={max_steps})",
        key="trainer.max_epochs",
    )


def steps_per_epoch(trainer: Any) -> int | None:
    """Optimiser steps of one training epoch: ``ceil(num_training_batches /
    accumulate_grad_batches)`` (``limit_train_batches`` included), ``None`` for a loader
    without a length. Call after the training loader is built (:func:`schedule_steps`)."""
    batches = trainer.num_training_batches
    if not math.isfinite(batches):
        return None
    return max(1, math.ceil(batches / trainer.accumulate_grad_batches))


def schedule_steps(trainer: Any, warmup_epochs: float) -> tuple[int, int, int | None]:
    """``(total, warmup, per_epoch)`` optimiser steps of ``trainer``'s fit.

    ``total`` is ``trainer.estimated_stepping_batches`` (``max_steps``, or ``max_epochs``
    epochs, whichever ends first), ``per_epoch`` :func:`steps_per_epoch` and ``warmup``
    ``round(warmup_epochs * per_epoch)``: a run stopped by ``max_steps`` warms up over the
    same steps as one stopped by ``max_epochs``. Builds the training loader when Lightning
    has not (``Trainer(max_steps=N)`` does not load it to count steps).

    Raises:
        ConfigError: No finite length (:func:`check_schedule_length`), or a warmup in
            epochs over a training loader without a length.
    """
    check_schedule_length(trainer.max_epochs, trainer.max_steps)
    total = trainer.estimated_stepping_batches
    build_train_loader(trainer)
    per_epoch = steps_per_epoch(trainer)
    if not math.isfinite(total) or total < 1:
        raise ConfigError(
            "the warmup-cosine schedule needs a finite run: the training loader has no "
            "length, so set trainer.max_steps >= 1",
            key="trainer.max_steps",
        )
    if per_epoch is None and warmup_epochs > 0:
        raise ConfigError(
            f"warmup_epochs={warmup_epochs} needs the steps of an epoch, but the training "
            "loader has no length; set warmup_epochs: 0",
            key="warmup_epochs",
        )
    # warmup_epochs * (steps of max_epochs epochs) / max_epochs, in this order: bit for bit
    # the warmup max_epochs-only runs always had (their total is those steps).
    epochs = max(trainer.max_epochs, 1)
    return int(total), round(warmup_epochs * ((per_epoch or 0) * epochs) / epochs), per_epoch


def check_common_arguments(
    batch_size: int | None, warmup_epochs: float, min_lr_ratio: float = 0.0
) -> None:
    """One-line ``ConfigError`` for the optimisation arguments every module takes."""
    if batch_size is not None:
        check_at_least("batch_size", batch_size, 1)
    check_at_least("warmup_epochs", warmup_epochs, 0)
    check_range("min_lr_ratio", min_lr_ratio, 0, 1)
