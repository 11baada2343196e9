"""The one training base of the package, [`TrainableModule`][] (subclassed by
[`SSLMethod`][ncl_lightning.methods.SSLMethod] and
[`Classifier`][ncl_lightning.methods.Classifier]).

The training semantics are the module's own Lightning hooks: the checks before a run
([`TrainableModule.check_data`][], [`TrainableModule.check_fit`][], at ``setup``), the speed
switches (``configure_model``), the checkpoint record (``on_save_checkpoint``). The
non-finite guard and the final validation are callbacks the module adds when the trainer
lacks them ([`TrainableModule.configure_callbacks`][], [`default_callbacks`][]).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from typing import Any, ClassVar

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.cli import OptimizerCallable
from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor, nn

from ncl_lightning.callbacks.final_validation import FinalValidation
from ncl_lightning.checkpoints.record import spec_of
from ncl_lightning.foundation.errors import UsageError
from ncl_lightning.foundation.internals import attached_trainer, built_by_cli, record_hparams
from ncl_lightning.foundation.options import CompileMode, NonFiniteLoss
from ncl_lightning.foundation.protocols import FiniteCheck
from ncl_lightning.methods.checks import check_common_arguments
from ncl_lightning.methods.guard import NonFiniteGuard
from ncl_lightning.methods.preflight import example_batch, preflight
from ncl_lightning.methods.record import write_record
from ncl_lightning.methods.speed_switches import apply_speed_switches, bf16_on_cpu_notice
from ncl_lightning.optim import decay_param_groups
from ncl_lightning.optim.schedule_setup import check_schedule_length, configure_warmup_cosine

# Arguments taken from the DataModule attribute of the same name: ncl-cli links them
# (data.<name> -> model.init_args.<name>); built in Python with None, at fit (setup).
DATA_LINKED: tuple[str, ...] = ("num_classes", "batch_size")


def default_callbacks() -> list[Callback]:
    """Fresh instances of the callbacks every fit of the package runs with: the
    [`NonFiniteGuard`][ncl_lightning.methods.guard.NonFiniteGuard] (stop or skip on a NaN/Inf
    loss, gradient or buffer) and the
    [`FinalValidation`][ncl_lightning.callbacks.final_validation.FinalValidation] (the last
    epoch validates). A module adds those the trainer lacks itself
    ([`TrainableModule.configure_callbacks`][]): passing them is never needed.

    Returns:
        A new list of new callbacks (the guard keeps per-run state: one list per run).
    """
    return [NonFiniteGuard(), FinalValidation()]


def missing(trainer: Any | None, callbacks: list[Callback]) -> list[Callback]:
    """The ``callbacks`` whose type ``trainer`` has no instance of (a subclass counts):
    Lightning replaces the trainer's callbacks of a type ``configure_callbacks`` returns."""
    present = list(trainer.callbacks) if trainer is not None else []
    return [c for c in callbacks if not any(isinstance(p, type(c)) for p in present)]



class FiniteSlot:
    """The finite check a module's training steps use: the guard the trainer attached, or,
    without a trainer (a step called by hand), one the slot owns. A
    [`TrainableModule`][ncl_lightning.methods.TrainableModule] keeps one and delegates to
    it (a component, not a mixin). The attached guard belongs to the trainer: like the
    trainer, it is not pickled.
    """

    def __init__(self) -> None:
        self.attached: FiniteCheck | None = None
        self.own: FiniteCheck | None = None  # built on first use without a trainer

    def check_for(self, module: nn.Module) -> FiniteCheck:
        """The check for ``module``'s current step.

        Raises:
            UsageError: ``module`` has a trainer but no guard among its callbacks
                attached itself.
        """
        trainer = attached_trainer(module)
        if trainer is None:
            if self.own is None:
                self.own = NonFiniteGuard()
            return self.own
        check = self.attached
        if check is None or check not in trainer.callbacks:  # identity: no Python calls
            raise UsageError(
                f"{type(module).__name__}: no NonFiniteGuard among trainer.callbacks; train "
                "with trainer.fit (configure_callbacks adds it) or add "
                "ncl_lightning.default_callbacks() to the Trainer"
            )
        return check

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "attached": None}  # the trainer's callback


def zero_loss(module: nn.Module, device: torch.device) -> Tensor:
    """A zero loss connected to every trainable parameter of ``module``: zero gradients,
    the same backward and all-reduce on every rank."""
    params = [p for p in module.parameters() if p.requires_grad]
    if not params:
        return torch.zeros((), device=device)
    return sum(p.sum() for p in params) * 0.0  # type: ignore[return-value]


class TrainableModule(L.LightningModule):
    """Hyper-parameters, parameter groups, warmup-cosine optimisation and the training
    step's finiteness check of every trainable module. Subclasses pass these arguments on
    from their ``__init__``, which keeps them in its signature (``model.init_args`` keys).

    Args:
        batch_size: The data's ``batch_size`` (CLI-linked; from Python it can stay
            ``None``). The learning rate is scaled by the batch the training loader loads,
            else the attached DataModule's; this value only when neither gives one.
        optimizer: Builds the optimiser from parameter groups (``None``: [`default_optimizer`][]).
        warmup_epochs: Linear warmup length in epochs (fractions allowed).
        min_lr_ratio: Final learning rate of the cosine schedule, relative to the peak.
        scale_lr: Multiply every learning rate by ``global batch / 256`` (except groups that
            set ``"scale_lr": False``, such as BayesNCL's gating head).
        exclude_bias_n_norm: No weight decay and no LARS adaptation for biases and norms.
        channels_last: NHWC memory format for the model and its image inputs.
        torch_compile: ``torch.compile`` the modules named in ``compile_targets``.
        compile_mode: ``torch.compile`` mode: ``default``, ``reduce-overhead``, ``max-autotune``.
        nonfinite_loss: On a NaN/Inf loss, ``stop`` (save ``last-finite.ckpt`` and raise
            [`NonFiniteLossError`][ncl_lightning.foundation.errors.NonFiniteLossError]) or ``skip``
            the batch; the same for non-finite gradients or BatchNorm statistics.
        grad_norm_limit: Treat a step whose gradient norm (over every parameter, before any
            clipping) exceeds this like a non-finite one; ``None`` (default): only
            non-finite gradients count. Not clipping: see ``trainer.gradient_clip_val``.

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
    captures_step: bool = False  # SSLMethod: step_mode compiled | graphs
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
        check_common_arguments(
            batch_size, warmup_epochs, min_lr_ratio, compile_mode, nonfinite_loss, grad_norm_limit
        )
        # Under ncl-cli the hparams are the parsed config (backbone and optimizer as
        # class_path dicts: `load_from_checkpoint` needs the file alone); from Python, module
        # objects stay out. Lightning collects the subclasses' __init__ arguments too.
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
        self._finite = FiniteSlot()  # the guard's check (not pickled), or the module's own
        self.checked = False  # check_data/check_fit have run (ncl-cli runs them before fit)

    @staticmethod
    def default_optimizer(params: Iterable) -> torch.optim.Optimizer:
        """The optimiser when none is configured; subclasses choose it."""
        raise NotImplementedError

    def param_groups(self) -> list[dict[str, Any]]:
        """Optimiser parameter groups; biases and norms without weight decay by default.
        Override to give new heads their own settings."""
        return decay_param_groups(self, self.exclude_bias_n_norm)

    def setup(self, stage: str) -> None:
        """At ``fit``, ``DATA_LINKED`` arguments left ``None`` (built in Python) take the
        DataModule's values, recorded in the hyper-parameters (loggers, checkpoints); then
        [`check_data`][] and [`check_fit`][] run, unless ``ncl-cli`` ran them already."""
        super().setup(stage)
        if stage != "fit":
            return
        notice = bf16_on_cpu_notice(self.trainer.precision, self.trainer.strategy.root_device)
        if notice is not None:
            rank_zero_warn(notice)
        data = self.trainer.datamodule
        found = {
            name: getattr(data, name)
            for name in DATA_LINKED
            if name in self.hparams and self.hparams[name] is None
            and type(getattr(data, name, None)) is int
        }  # fmt: skip
        record_hparams(self, **found)
        self.batch_size = found.get("batch_size", self.batch_size)
        if not self.checked:
            self.check_data(data)
            self.check_fit(self.trainer, data)

    def check_data(self, datamodule: Any) -> None:
        """Before any run (``ncl-cli``: every subcommand, before anything is written; else
        at the ``setup`` of a fit): every learning rate, and a zero batch shaped like the
        data through the model ([`preflight`][ncl_lightning.methods.preflight.preflight])."""
        preflight(self, example_batch(datamodule))
        self.checked = True

    def check_fit(self, trainer: L.Trainer, datamodule: Any) -> None:
        """Before ``fit``: the schedule needs a finite ``max_epochs`` or ``max_steps``.
        Subclasses add theirs (``SSLMethod``: negatives in the batch)."""
        check_schedule_length(trainer.max_epochs, trainer.max_steps)

    def configure_model(self) -> None:
        """Apply ``channels_last`` and ``torch_compile`` once, before the strategy wraps the
        module
        ([`apply_speed_switches`][ncl_lightning.methods.speed_switches.apply_speed_switches])."""
        apply_speed_switches(self)

    def configure_optimizers(self) -> dict[str, Any]:
        """The optimiser over [`param_groups`][], learning rates scaled by the global
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

    def configure_callbacks(self) -> list[Callback]:
        """[`default_callbacks`][] the trainer lacks (a user's own instance of a type, or
        of a subclass, is kept)."""
        return missing(attached_trainer(self), default_callbacks())

    def backbone_spec(self) -> dict[str, Any] | None:
        """``{"class_path", "init_args"}`` rebuilding ``self.backbone`` (checkpoint record),
        or ``None`` if unknown. Subclasses that load a pretrained backbone override it."""
        return spec_of(getattr(self, "backbone", None), self.hparams.get("backbone"))

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """The record of every checkpoint, weights-only ones too
        ([`write_record`][ncl_lightning.methods.record.write_record])."""
        write_record(self, checkpoint)

    # -- finiteness: the FiniteSlot component (above) -----------------------------------
    def attach_finite_check(self, check: FiniteCheck) -> None:
        """Called by the non-finite guard at ``setup``: the training steps use ``check``."""
        self._finite.attached = check

    def nonfinite_guard(self) -> FiniteCheck:
        """The guard the trainer attached (else ``UsageError``); no trainer: the module's."""
        return self._finite.check_for(self)

    def loss_is_finite(self, loss: Tensor) -> bool:
        """``True`` if ``loss``, buffers and parameters are finite on every rank; else stop
        (raises ``NonFiniteLossError``) or skip (``False``), per ``nonfinite_loss``. Before
        logging: ``if not self.loss_is_finite(loss): return self.skipped_step_loss()``."""
        return self.nonfinite_guard().check_loss(self, loss)

    def check_finite_later(self, loss: Tensor) -> bool:
        """[`loss_is_finite`][] without a host sync (``True`` under a trainer): the next
        batch reads the verdict, undoing this one if needed (see [`after_finite_step`][])."""
        return self.nonfinite_guard().check_loss_later(self, loss)

    def after_finite_step(self, effect: Callable[[], None]) -> None:
        """Run ``effect`` once this batch is known to be finite (dropped if it is not)."""
        self.nonfinite_guard().after_finite(effect)

    def on_validation_model_zero_grad(self) -> None:
        """Judge the last deferred batch before Lightning releases the gradients for
        validation: a non-finite gradient is named from them (one sync, per validation)."""
        if self._finite.attached is not None:
            self._finite.attached.judge_pending(self)
        super().on_validation_model_zero_grad()

    def skipped_step_loss(self) -> Tensor:
        """What a skipped step returns: a zero loss on every trainable parameter."""
        return zero_loss(self, self.device)


def common_arguments(values: dict[str, Any]) -> dict[str, Any]:
    """The entries of ``values`` (a subclass ``__init__``'s ``locals()``) that
    [`TrainableModule`][] takes, read off its signature: what the bases pass on to it."""
    names = inspect.signature(TrainableModule.__init__).parameters
    return {name: values[name] for name in names if name != "self"}
