"""Base LightningModule for self-supervised methods: the training loop and its hooks.

A method subclasses [`SSLMethod`][] and implements two hooks:

* ``encode(x) -> Encoded``: backbone features ``h`` and the features ``z`` that enter the
  objective (and that the interpretability metrics read);
* ``objective(views) -> Tensor``: the self-supervised loss over the encoded views
  (``objective(views, labels)`` for methods that set ``needs_labels = True``, e.g. SupCon).

Everything else (online linear probe and kNN, optimiser groups with
bias/norm exclusion, learning-rate scaling by global batch / 256, warmup-cosine schedule)
is here or in [`TrainableModule`][ncl_lightning.methods.trainable.TrainableModule], once. The module
never sees which dataset it is trained on: batches are ``(views, labels)`` for training and
``(images, labels)`` for evaluation. A NaN/Inf loss stops training with a checkpoint of the
last finite state, or skips the batch (``nonfinite_loss``;
[`ncl_lightning.methods.guard`][]), and [`preflight`][ncl_lightning.methods.preflight.preflight]
checks learning rates and the fit of model and data before training.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial
from typing import Any, ClassVar, NamedTuple

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.cli import OptimizerCallable
from torch import Tensor, nn
from torchmetrics import MetricCollection
from torchmetrics.classification import MulticlassAccuracy

from ncl_lightning.callbacks.feature_statistics import default_feature_statistics
from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.foundation.internals import attached_trainer, logs_this_step, record_hparams
from ncl_lightning.foundation.options import CompileMode, NonFiniteLoss, StepMode, check_step_mode
from ncl_lightning.foundation.protocols import CapturableViews
from ncl_lightning.foundation.validation import check_at_least, check_positive
from ncl_lightning.methods.captured import CapturedStep, capture_mode, check_capturable
from ncl_lightning.methods.checks import check_backbone
from ncl_lightning.methods.faults import LOSS_SCALE
from ncl_lightning.methods.guard import loss_code
from ncl_lightning.methods.preflight import check_batch_negatives, check_views
from ncl_lightning.methods.trainable import TrainableModule, common_arguments, missing
from ncl_lightning.metrics.functional.knn import check_knn_arguments, weighted_knn_predict
from ncl_lightning.nn.gather import gather_no_grad
from ncl_lightning.nn.protocols import Backbone
from ncl_lightning.optim import LARS, decay_param_groups


class OnlineEvaluator(nn.Module):
    """Online evaluation during pre-training: a linear probe and a weighted kNN classifier.

    Both read *detached* backbone features, so they measure the representation without
    changing it. The probe trains on the augmented first view of each training batch
    (solo-learn's online evaluation); the kNN bank holds the training features of the
    current epoch, gathered from every rank, and classifies the clean validation images
    (weighted cosine kNN of Wu et al., 2018).

    Args:
        in_dim: Backbone feature width.
        num_classes: Number of classes (> 0).
        knn_k: Neighbours for the kNN classifier.
        knn_temperature: Temperature of the kNN similarity weights.
    """

    def __init__(self, in_dim: int, num_classes: int, knn_k: int, knn_temperature: float) -> None:
        super().__init__()
        if num_classes < 1:
            raise ConfigError(f"online evaluation needs num_classes >= 1, got {num_classes}")
        check_knn_arguments(knn_k, knn_temperature, prefix="knn_")
        self.probe = nn.Linear(in_dim, num_classes)
        self.num_classes = num_classes
        self.knn_k = knn_k
        self.knn_temperature = knn_temperature
        self._bank: list[Tensor] = []
        self._bank_labels: list[Tensor] = []
        self._gathered: tuple[Tensor, Tensor] | None = None

    def probe_loss(self, h: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        """Cross entropy of the probe on detached features; returns ``(loss, logits [B, C])``."""
        logits = self.probe(h.detach())
        return F.cross_entropy(logits, y), logits

    def logits(self, h: Tensor) -> Tensor:
        """Probe logits ``[B, C]`` for features ``h`` ``[B, D]``."""
        return self.probe(h.detach())

    def reset_bank(self) -> None:
        """Forget the bank (called at the start of each training epoch)."""
        self._bank, self._bank_labels, self._gathered = [], [], None

    @torch.no_grad()
    def add_to_bank(self, h: Tensor, y: Tensor) -> None:
        """Store L2-normalised training features ``[B, D]`` and labels ``[B]``."""
        self._bank.append(F.normalize(h.detach().float(), dim=1))
        self._bank_labels.append(y.detach())
        self._gathered = None

    @torch.no_grad()
    def gather_bank(self) -> bool:
        """Collect the bank from every rank; False when it is empty (e.g. sanity check)."""
        if not self._bank:
            self._gathered = None
            return False
        self._gathered = (
            gather_no_grad(torch.cat(self._bank)),
            gather_no_grad(torch.cat(self._bank_labels)),
        )
        return True

    @torch.no_grad()
    def knn_scores(self, h: Tensor) -> Tensor | None:
        """kNN class scores ``[B, C]`` for features ``[B, D]``, or None without a bank."""
        if self._gathered is None:
            return None
        bank, labels = self._gathered
        return weighted_knn_predict(
            F.normalize(h.float(), dim=1),
            bank,
            labels,
            self.num_classes,
            self.knn_k,
            self.knn_temperature,
        )


class StepLosses(NamedTuple):
    """What [`SSLMethod.training_losses`][] returns for one training batch."""

    loss: Tensor
    """The loss the backward runs on ``[]``: objective plus the online probe's."""
    objective: Tensor
    """The self-supervised objective ``[]``."""
    probe_loss: Tensor | None
    """The online probe's cross entropy ``[]`` (``None`` without classes)."""
    logits: Tensor | None
    """The online probe's logits ``[B, C]`` on the first view."""
    h: Tensor
    """Backbone features of the first view ``[B, D]``."""


class Encoded(NamedTuple):
    """What [`SSLMethod.encode`][] returns for a batch of ``B`` images."""

    h: Tensor
    """Backbone features ``[B, D]`` (what probes and fine-tuning use)."""
    z: Tensor
    """Features entering the objective ``[B, d]`` (after projector and non-negative map)."""


def float32(encoded: NamedTuple) -> NamedTuple:
    """``encoded`` (an ``Encoded`` or a method's own named tuple) with every floating tensor
    in float32: at InfoNCE temperatures of 0.1-0.2, bf16 logits (8 bits of mantissa) would
    round the loss, and the callbacks' metrics expect float32 features."""
    return encoded._make(
        t.float() if isinstance(t, Tensor) and t.is_floating_point() else t for t in encoded
    )


def default_optimizer(params: Iterable) -> torch.optim.Optimizer:
    """LARS, momentum 0.9, weight decay 1e-4, η 0.02, clipped; base lr 0.3 before batch scaling.

    The paper configs set their own optimiser (the CIFAR ones lr 0.4, ImageNet-100 0.3).
    """
    return LARS(params, lr=0.3, momentum=0.9, weight_decay=1e-4, eta=0.02, clip_lr=True)


class SSLMethod(TrainableModule):
    """Shared training loop of every self-supervised method.

    Args:
        backbone: Encoder ``[B, C, H, W] -> [B, D]`` exposing ``out_dim``.
        num_classes: Classes for the online probe and kNN (0 turns them off). The CLI links
            it from the DataModule; ``None`` (from Python): the attached DataModule's
            ``num_classes`` at the start of ``fit`` (0 when it has none), then stored in
            the hyper-parameters ([`setup`][]).
        batch_size: See [`TrainableModule`][ncl_lightning.methods.trainable.TrainableModule], like
            ``optimizer`` (default LARS, ``default_optimizer``), ``warmup_epochs``,
            ``min_lr_ratio``, ``scale_lr``, ``exclude_bias_n_norm``, ``channels_last``,
            ``torch_compile``, ``compile_mode``, ``nonfinite_loss`` and
            ``grad_norm_limit``.
        probe_lr: Learning rate of the online linear probe.
        knn_k: Neighbours of the online kNN classifier.
        knn_temperature: Temperature of the kNN weights.
        step_mode: How the training step runs (``StepMode``).

    Attributes:
        needs_labels: Class flag: ``objective`` also receives the batch labels ``[B]``
            (supervised contrastive variants); ``False`` for self-supervised methods.
        views_per_image: Class value: the augmented views of each image ``objective``
            trains on (``ncl-cli`` checks the DataModule's ``n_views`` against it).
    """

    needs_labels: ClassVar[bool] = False
    views_per_image: ClassVar[int] = 2
    default_optimizer = staticmethod(default_optimizer)

    def __init__(
        self,
        backbone: Backbone,
        num_classes: int | None = None,
        batch_size: int | None = None,
        optimizer: OptimizerCallable | None = None,
        warmup_epochs: float = 10.0,
        min_lr_ratio: float = 0.0,
        scale_lr: bool = True,
        exclude_bias_n_norm: bool = True,
        probe_lr: float = 0.1,
        knn_k: int = 200,
        knn_temperature: float = 0.07,
        channels_last: bool = False,
        torch_compile: bool = False,
        compile_mode: CompileMode = "default",
        nonfinite_loss: NonFiniteLoss = "stop",
        grad_norm_limit: float | None = None,
        step_mode: StepMode = "eager",
    ) -> None:
        check_backbone(backbone)
        check_step_mode(step_mode)
        if step_mode != "eager" and not type(self).capturable:
            raise ConfigError(
                f"{type(self).__name__}: step_mode: {step_mode} is not supported (its "
                "training step does work outside the captured graphs that a skipped step must "
                "not do); set model.init_args.step_mode: eager",
                key="step_mode",
            )
        if num_classes is not None:
            check_at_least("num_classes", num_classes, 0)
        check_positive("probe_lr", probe_lr)
        check_at_least("knn_k", knn_k, 1)
        check_positive("knn_temperature", knn_temperature)
        super().__init__(**common_arguments(locals()))
        self.step_mode: StepMode = step_mode
        self.backbone = backbone
        self._train_logs: dict[str, Tensor] = {}  # see log_train
        self._captured: CapturedStep | None = None  # step_mode compiled | graphs, during fit
        self._capture: str | None = None  # its torch.compile mode, chosen at setup
        self._epoch_objective: Tensor | None = None  # summed on the device, logged per epoch
        self._epoch_steps = 0
        self._build_online(num_classes or 0)

    def setup(self, stage: str) -> None:
        """``num_classes=None``: at ``fit``, the attached DataModule's ``num_classes``
        (0 without one) builds the online probe and kNN and is stored in the
        hyper-parameters, so a checkpoint rebuilds the same module."""
        super().setup(stage)  # num_classes from the DataModule, when it has one
        if stage == "fit" and self.hparams.num_classes is None:
            record_hparams(self, num_classes=0)  # no classes known: no probe, no kNN
        if stage == "fit" and self.online is None and self.hparams.num_classes:
            self._build_online(self.hparams.num_classes)
        if stage == "fit":  # the step's mode on this device; Lightning's loop follows it
            self._capture = capture_mode(self.step_mode, self.trainer.strategy.root_device)
            self.automatic_optimization = self._capture is None

    capturable: ClassVar[bool] = True
    """Class flag: the step can run captured (``step_mode`` compiled or graphs); ``False``
    for a method that does per-step work outside ``training_losses`` (BYOL's EMA)."""
    compile_step: ClassVar[bool] = True
    """``False`` runs a captured step's functions eagerly (same manual-optimisation step)."""

    @property
    def captures_step(self) -> bool:
        """Whether the training step runs captured (``step_mode`` compiled or graphs on a
        device where it applies), from the start of ``fit``."""
        return self._captured is not None

    def on_fit_start(self) -> None:
        """Compile the captured step's parts (views, forward + loss + probe, the judges,
        the LARS update) once the module is on its device and its optimiser exists."""
        self._captured = None
        if self._capture is None:
            return
        trainer = self.trainer
        check_capturable(trainer, trainer.optimizers, LARS)
        for optimizer in trainer.optimizers:
            optimizer.capture(self._capture, compile=self.compile_step)
        if isinstance(trainer.datamodule, CapturableViews) and self.compile_step:
            trainer.datamodule.capture_views(self._capture)
        self._captured = CapturedStep(self, self._capture, compile=self.compile_step)

    def on_fit_end(self) -> None:
        """Drop the compiled step (it holds the trainer's optimiser)."""
        if self._captured is not None:
            for optimizer in self.trainer.optimizers:
                optimizer.capture(None)
        self._captured = None

    def configure_callbacks(self) -> list[Callback]:
        """The default callbacks and the feature statistics of ``z``
        ([`default_feature_statistics`][ncl_lightning.callbacks.default_feature_statistics]),
        those the trainer lacks."""
        own = missing(attached_trainer(self), [default_feature_statistics()])
        return [*super().configure_callbacks(), *own]

    def check_data(self, datamodule: Any) -> None:
        """[`TrainableModule.check_data`][ncl_lightning.methods.TrainableModule.check_data], and
        the DataModule yields ``views_per_image`` views."""
        super().check_data(datamodule)
        check_views(type(self).__name__, self.views_per_image, datamodule)

    def check_fit(self, trainer: L.Trainer, datamodule: Any) -> None:
        """The finite schedule, and a contrastive loss gets negatives in every batch
        ([`check_batch_negatives`][ncl_lightning.methods.preflight.check_batch_negatives])."""
        super().check_fit(trainer, datamodule)
        check_batch_negatives(self, datamodule, trainer.world_size)

    def _build_online(self, num_classes: int) -> None:
        """The online probe and kNN (none for 0 classes) and their accuracy metrics
        (train/val/test probe, val kNN)."""
        hp = self.hparams
        self.online = (
            OnlineEvaluator(self.backbone.out_dim, num_classes, hp.knn_k, hp.knn_temperature)
            if num_classes
            else None
        )
        if self.online is not None:
            c = self.online.num_classes
            probe = {"online_acc": MulticlassAccuracy(c, average="micro")}
            if c >= 5:
                probe["online_acc_top5"] = MulticlassAccuracy(c, top_k=5, average="micro")
            self.probe_metrics = nn.ModuleDict(
                {s: MetricCollection(probe).clone(prefix=f"{s}/") for s in ("val", "test")}
            )
            self.knn_metric = MulticlassAccuracy(c, average="micro")
            self.train_acc = MulticlassAccuracy(c, average="micro")

    # -- hooks for subclasses ---------------------------------------------------------
    def encode(self, x: Tensor) -> Encoded:
        """Encode images ``[B, C, H, W]``; subclasses add projector and feature maps."""
        raise NotImplementedError

    def objective(self, views: list[Encoded]) -> Tensor:
        """Self-supervised loss (scalar) over the encoded views of one batch.

        Methods with ``needs_labels = True`` get a second argument, the labels ``[B]``.
        """
        raise NotImplementedError

    def param_groups(self) -> list[dict[str, Any]]:
        """Optimiser parameter groups; override to give new heads their own settings."""
        probe = {id(p) for p in self.online.parameters()} if self.online is not None else set()
        groups = decay_param_groups(self, self.exclude_bias_n_norm, skip=probe)
        if self.online is not None:
            groups.append(
                {
                    "params": list(self.online.parameters()),
                    "lr": self.hparams.probe_lr,
                    "weight_decay": 0.0,
                    "lars_exclude": True,
                }
            )
        return [g for g in groups if g["params"]]

    # -- training ---------------------------------------------------------------------
    def forward(self, x: Tensor) -> Encoded:
        return self.encode(x)

    def log_train(self, metrics: dict[str, Tensor]) -> None:
        """Log training values from inside [`objective`][] once the step's loss is known
        to be finite (a skipped batch logs nothing; ``sync_dist=True``)."""
        self._train_logs.update(metrics)

    def training_losses(self, views: list[Tensor], y: Tensor) -> StepLosses:
        """Encode the views, the objective in float32 and the online probe's loss: the
        part of the step both step modes share."""
        self._train_logs = {}
        encoded = [self.encode(v) for v in views]
        with torch.autocast(self.device.type, enabled=False):  # float32 under bf16-mixed
            full = [float32(e) for e in encoded]
            objective = self.objective(full, y) if self.needs_labels else self.objective(full)
        loss, probe_loss, logits = objective, None, None
        if self.online is not None:
            probe_loss, logits = self.online.probe_loss(encoded[0].h, y)
            loss = loss + probe_loss
        return StepLosses(loss, objective, probe_loss, logits, encoded[0].h)

    def step_forward(
        self, views: list[Tensor], y: Tensor
    ) -> tuple[StepLosses, Tensor, list[Tensor]]:
        """The captured step's forward (one graph with its backward): the losses, the
        non-finite code of loss, parameters and buffers ``[]`` (the guard's deferred code)
        and a copy of every buffer from before the forward (put back if the step is
        skipped)."""
        backup = [b.clone() for b in self.buffers()]
        losses = self.training_losses(views, y)
        return losses, LOSS_SCALE * loss_code(self, losses.loss.detach()), backup

    def training_step(self, batch: tuple[list[Tensor], Tensor], batch_idx: int) -> Tensor | None:
        if self._captured is not None:
            return self._captured_step(*batch)
        views, y = batch
        losses = self.training_losses(views, y)
        # Judged on the device; the guard reads the verdict at the start of the next batch
        # and undoes this one if it was not finite (no host synchronisation here).
        if not self.check_finite_later(losses.loss):  # False only without a trainer
            return self.skipped_step_loss()  # no bank, metric or log update from this batch
        if self.online is not None:
            self.after_finite_step(partial(self._online_updates, losses.h, losses.logits, y))
        self._log_step(losses)
        return losses.loss

    def _captured_step(self, views: list[Tensor], y: Tensor) -> None:
        """One captured step (module ``methods.captured``): forward, backward, the verdict
        and the masked update as graphs; the guard reads the verdict when it is ready."""
        captured = self._captured
        forward, judge, settle = captured.parts(views, y)
        losses, code, backup = forward(views, y)
        self.manual_backward(losses.loss)
        grads = [p.grad for p in captured.params if p.grad is not None]
        code = judge(code, grads, self.grad_norm_limit)
        if self.trainer.world_size > 1:  # every rank skips, or none
            code = self.trainer.strategy.reduce(code, reduce_op="max")
        skip = settle(code, captured.buffers, backup)
        effect = None
        if self.online is not None:  # graph outputs are overwritten by the next replay
            h, logits = losses.h.detach().clone(), losses.logits.detach().clone()
            effect = partial(self._online_updates, h, logits, y)
        self.nonfinite_guard().captured_verdict(self, code, effect)  # names this step
        self._log_step(losses)  # before the step counter moves (the last step logs)
        optimizer = self.optimizers()
        optimizer.step(skip=skip)
        optimizer.zero_grad()
        self.lr_schedulers().step()

    def _log_step(self, losses: StepLosses) -> None:
        """The step's values to the loggers, only on the steps Lightning writes
        (``log_every_n_steps``) and the last one of an epoch or of the fit: a ``self.log``
        call costs ~770 Python calls. The batch losses are this rank's: ``sync_dist=True``
        logs their mean over the ranks. The epoch's mean objective (the progress bar) is
        summed on the device and logged at the end of the epoch. A batch found non-finite
        later has its values in the log (they show what went wrong) but not in the kNN
        bank or the accuracy."""
        objective = losses.objective.detach()
        if self._epoch_objective is None:
            self._epoch_objective = objective.clone()
        else:
            self._epoch_objective += objective
        self._epoch_steps += 1
        trainer = attached_trainer(self)
        if trainer is None:  # a step called by hand: nothing to log to
            return
        # Lightning's logging steps, and the last step of an epoch or of the fit, so that
        # callback_metrics (checkpoint monitors, a one-batch fast_dev_run) hold its values.
        last = trainer.is_last_batch or trainer.global_step + 1 == trainer.max_steps
        if not (last or logs_this_step(trainer)):
            return
        # Copies: callback_metrics keep the values, and a CUDA graph's outputs are
        # overwritten by its next replay.
        values = {"train/objective": objective, **self._train_logs}
        if losses.probe_loss is not None:
            values["train/probe_loss"] = losses.probe_loss
        values["train/loss"] = losses.loss
        self.log_dict({k: v.detach().clone() for k, v in values.items()}, sync_dist=True)

    def on_train_epoch_end(self) -> None:
        """The epoch's mean objective (progress bar) and the probe's training accuracy."""
        if self._epoch_objective is not None:
            mean = self._epoch_objective / self._epoch_steps
            self.log("objective", mean, prog_bar=True, logger=False, sync_dist=True)
        if self.online is not None and self._epoch_steps:
            self.log("train/online_acc", self.train_acc, on_step=False, on_epoch=True)
        self._epoch_objective, self._epoch_steps = None, 0

    @torch.no_grad()
    def _online_updates(self, h: Tensor, logits: Tensor, y: Tensor) -> None:
        """A finite batch's features into the kNN bank and its probe accuracy."""
        self.online.add_to_bank(h, y)
        self.train_acc.update(logits.detach(), y)

    def on_train_epoch_start(self) -> None:
        if self.online is not None:
            self.online.reset_bank()

    def on_validation_epoch_start(self) -> None:
        if self.online is not None:
            self.online.gather_bank()

    def _eval_step(self, batch: tuple[Tensor, Tensor], stage: str) -> Encoded:
        x, y = batch
        out = self.encode(x)
        if self.online is not None:
            self.probe_metrics[stage].update(self.online.logits(out.h), y)
            self.log_dict(self.probe_metrics[stage], on_epoch=True, prog_bar=stage == "val")
            knn = self.online.knn_scores(out.h) if stage == "val" else None
            if knn is not None:
                self.knn_metric.update(knn, y)
                self.log("val/knn_acc", self.knn_metric, on_epoch=True)
        return float32(out)  # callbacks' metrics get float32 features under bf16-mixed

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Encoded:
        """Online evaluation; returns the features for callbacks (``FeatureStatistics``)."""
        return self._eval_step(batch, "val")

    def test_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Encoded:
        """Online probe on the test split; returns the features for callbacks."""
        return self._eval_step(batch, "test")

    def predict_step(self, batch: Any, batch_idx: int) -> Encoded:
        x = batch[0] if isinstance(batch, list | tuple) else batch
        return self.encode(x)
