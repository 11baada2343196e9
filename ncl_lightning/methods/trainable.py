"""The one training base of the package, [`TrainableModule`][] (subclassed by
[`SSLMethod`][ncl_lightning.methods.SSLMethod] and
[`Classifier`][ncl_lightning.methods.Classifier]).

Cross-cutting behaviour is in run-time callbacks that read the module's typed attributes
(``nonfinite_loss``, ``grad_norm_limit``, ``channels_last``, ``torch_compile``,
``compile_mode``), installed by ``ncl-cli`` ([`ncl_lightning.default_callbacks`][]) or,
on a plain ``Trainer``, by [`TrainableModule.configure_callbacks`][].
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from typing import Any, ClassVar

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.cli import OptimizerCallable
from torch import Tensor

from ncl_lightning.checkpoints.record import RECORD_KEY, make_record, spec_of
from ncl_lightning.foundation.components import FiniteCheck, missing_defaults
from ncl_lightning.foundation.internals import attached_trainer, built_by_cli, record_hparams
from ncl_lightning.foundation.options import CompileMode, NonFiniteLoss
from ncl_lightning.methods.checks import check_common_arguments
from ncl_lightning.methods.finite import FiniteSlot, zero_loss
from ncl_lightning.optim import decay_param_groups
from ncl_lightning.optim.schedule_setup import check_schedule_length, configure_warmup_cosine

# Arguments taken from the DataModule attribute of the same name: ncl-cli links them
# (data.<name> -> model.init_args.<name>); built in Python with None, at fit (setup).
DATA_LINKED: tuple[str, ...] = ("num_classes", "batch_size")
# Keys of the default components (foundation.components, registered by the shell) every
# module asks for, and those a self-supervised method (``SSLMethod``) adds.
RUN_TIME_COMPONENTS: tuple[str, ...] = (
    "preflight", "speed_switches", "nonfinite_guard", "checkpoint_record", "final_validation",
)  # fmt: skip
FEATURE_COMPONENTS: tuple[str, ...] = ("feature_statistics",)


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
        DataModule's values, recorded in the hyper-parameters (loggers, checkpoints)."""
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

    def check_trainer(self, trainer: L.Trainer) -> None:
        """Before ``fit`` (``ncl-cli``, the preflight callback): the schedule needs a finite
        ``max_epochs`` or ``max_steps``."""
        check_schedule_length(trainer.max_epochs, trainer.max_steps)

    def default_components(self) -> tuple[str, ...]:
        """Keys of the default components this module runs with: the run-time ones
        ([`SSLMethod`][ncl_lightning.methods.ssl.SSLMethod] adds the feature statistics of
        ``z``). Override to choose others."""
        return RUN_TIME_COMPONENTS

    def configure_callbacks(self) -> list[Callback]:
        """The default components ([`default_components`][]) the trainer lacks, by
        injection (a user's own instance of a type is kept; ``ncl-cli`` has installed the
        run-time ones already)."""
        return missing_defaults(attached_trainer(self), only=self.default_components())

    def backbone_spec(self) -> dict[str, Any] | None:
        """``{"class_path", "init_args"}`` rebuilding ``self.backbone`` (checkpoint record),
        or ``None`` if unknown. Subclasses that load a pretrained backbone override it."""
        return spec_of(getattr(self, "backbone", None), self.hparams.get("backbone"))

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """The record's core (method class, backbone spec) for a weights-only save, which
        Lightning shows to no callback (not to
        [`CheckpointRecord`][ncl_lightning.runtime.checkpoint_record.CheckpointRecord]), only to
        this hook."""
        checkpoint.setdefault(RECORD_KEY, make_record(self, self.backbone_spec()))

    # -- finiteness: the FiniteSlot component (methods.finite) --------------------------
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
