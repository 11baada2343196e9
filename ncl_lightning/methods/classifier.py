"""Base LightningModule of every supervised classifier: probes, fine-tuning, NCE.

A subclass builds ``self.backbone`` and implements [`Classifier.encode`][] (images
to the representation the head reads) and [`Classifier.head`][] (representation to
logits). The base trains with cross entropy on the first view of ``(views, labels)``
batches (DataModules with ``n_views: 1``; plain ``(images, labels)`` also work), logs
top-1/top-5 accuracy under ``{stage}/{label}/acc_top1`` and ``.../acc_top5`` and returns
[`Encoded`][ncl_lightning.methods.Encoded] from evaluation steps so the interpretability
callbacks read the representation like they do for pre-training.

A DataModule with several test sets exposes ``test_names`` (e.g.
[`ImageNetOODDataModule`][ncl_lightning.data.ImageNetOODDataModule]); each set is then logged as
``test/<name>/{label}/acc_top1``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from lightning.pytorch.cli import OptimizerCallable
from torch import Tensor, nn
from torchmetrics import MetricCollection
from torchmetrics.classification import MulticlassAccuracy

from ncl_lightning.foundation.options import CompileMode, NonFiniteLoss
from ncl_lightning.foundation.protocols import MultipleTestSets
from ncl_lightning.foundation.validation import check_at_least, check_range
from ncl_lightning.methods.ssl import Encoded, float32
from ncl_lightning.methods.trainable import TrainableModule, common_arguments


def default_sgd(params: Iterable) -> torch.optim.Optimizer:
    """SGD with momentum 0.9, lr 0.1 (before batch scaling), no weight decay."""
    return torch.optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=0.0)


def accuracy_metrics(num_classes: int) -> MetricCollection:
    """Top-1 and top-5 (top-``C`` when ``C < 5``) micro accuracy."""
    return MetricCollection(
        {
            "acc_top1": MulticlassAccuracy(num_classes, average="micro"),
            "acc_top5": MulticlassAccuracy(num_classes, top_k=min(5, num_classes), average="micro"),
        }
    )


def first_view(batch: tuple[Any, Tensor]) -> tuple[Tensor, Tensor]:
    """``(x [B, C, H, W], y [B])`` from ``(views, y)`` or ``(images, y)`` batches."""
    x, y = batch
    return (x[0] if isinstance(x, list | tuple) else x), y


class Classifier(TrainableModule):
    """Supervised training and evaluation loop shared by probes, fine-tuning and NCE.

    Args:
        num_classes: Number of classes (> 0; the CLI links it from the DataModule).
        batch_size: See [`TrainableModule`][ncl_lightning.methods.trainable.TrainableModule], like
            ``optimizer`` (default SGD, ``default_sgd``), ``warmup_epochs``,
            ``min_lr_ratio``, ``scale_lr``, ``exclude_bias_n_norm``, ``channels_last``,
            ``torch_compile``, ``compile_mode``, ``nonfinite_loss`` and
            ``grad_norm_limit``.
        label_smoothing: Cross-entropy label smoothing.
        lr_milestones: Epochs at which the learning rate is multiplied by ``lr_gamma``
            (step decay after the warmup, as the NCL release's ImageNet-100 linear probe:
            ``[60, 80]``); ``None`` (default): warmup then cosine decay.
        lr_gamma: Step-decay factor (release: 0.1).

    Attributes:
        label: Class attribute naming the protocol in metric keys (``offline_linear``); an
            instance may set its own before ``Classifier.__init__`` builds the metrics
            (the probes on ``z``: ``offline_linear_z``).
    """

    label: ClassVar[str] = "classifier"
    default_optimizer = staticmethod(default_sgd)

    def __init__(
        self,
        num_classes: int = 0,
        batch_size: int | None = None,
        optimizer: OptimizerCallable | None = None,
        warmup_epochs: float = 0.0,
        min_lr_ratio: float = 0.0,
        scale_lr: bool = True,
        exclude_bias_n_norm: bool = True,
        label_smoothing: float = 0.0,
        lr_milestones: list[int] | None = None,
        lr_gamma: float = 0.1,
        channels_last: bool = False,
        torch_compile: bool = False,
        compile_mode: CompileMode = "default",
        nonfinite_loss: NonFiniteLoss = "stop",
        grad_norm_limit: float | None = None,
    ) -> None:
        check_at_least("num_classes", num_classes, 1)
        check_range("label_smoothing", label_smoothing, 0, 1, closed="[)")
        if lr_milestones is not None:
            for milestone in lr_milestones:
                check_at_least("lr_milestones", milestone, 1)
        check_range("lr_gamma", lr_gamma, 0, 1, closed="(]")
        super().__init__(**common_arguments(locals()))
        self.label_smoothing = label_smoothing
        self.lr_milestones = lr_milestones
        self.lr_gamma = lr_gamma
        self.train_metrics = accuracy_metrics(num_classes).clone(prefix=f"train/{self.label}/")
        self.val_metrics = accuracy_metrics(num_classes).clone(prefix=f"val/{self.label}/")
        self.test_metrics = nn.ModuleList()

    # -- hooks for subclasses ---------------------------------------------------------
    def encode(self, x: Tensor) -> Encoded:
        """Images ``[B, C, H, W]`` to ``Encoded(h, z)``: backbone features and the
        representation the head classifies (``z``)."""
        raise NotImplementedError

    def head(self, z: Tensor) -> Tensor:
        """Representation ``[B, d]`` to logits ``[B, num_classes]``."""
        raise NotImplementedError

    # -- steps ------------------------------------------------------------------------
    def forward(self, x: Tensor) -> Tensor:
        """Logits ``[B, num_classes]`` of images ``[B, C, H, W]``."""
        return self.head(self.encode(x).z)

    def training_step(self, batch: tuple[Any, Tensor], batch_idx: int) -> Tensor:
        x, y = first_view(batch)
        logits = self(x).float()  # the loss in float32 under bf16-mixed
        loss = F.cross_entropy(logits, y, label_smoothing=self.label_smoothing)
        if not self.loss_is_finite(loss):  # raises under nonfinite_loss: stop
            return self.skipped_step_loss()  # no metric or log update from this batch
        self.train_metrics(logits.detach(), y)
        # This rank's batch loss: averaged over the ranks. The accuracies are Metrics: the
        # epoch value reduces their states over the ranks; the value on step is this
        # rank's shard of the batch (Lightning logs rank 0's).
        self.log(f"train/{self.label}/loss", loss, prog_bar=True, sync_dist=True)
        self.log_dict(self.train_metrics, on_step=True, on_epoch=True)
        return loss

    def _evaluate(self, batch: tuple[Any, Tensor], metrics: MetricCollection) -> Encoded:
        x, y = first_view(batch)
        out = self.encode(x)
        metrics.update(self.head(out.z).float(), y)
        self.log_dict(metrics, on_epoch=True, add_dataloader_idx=False)
        return float32(out)  # callbacks' metrics get float32 features under bf16-mixed

    def validation_step(self, batch: tuple[Any, Tensor], batch_idx: int) -> Encoded:
        return self._evaluate(batch, self.val_metrics)

    def on_test_start(self) -> None:
        """One metric collection per test set (``datamodule.test_names`` when present)."""
        dm = self.trainer.datamodule
        names = (dm.test_names if isinstance(dm, MultipleTestSets) else None) or [None]
        c = self.hparams.num_classes
        prefixes = [
            f"test/{self.label}/" if n is None else f"test/{n}/{self.label}/" for n in names
        ]
        self.test_metrics = nn.ModuleList(
            [accuracy_metrics(c).clone(prefix=p) for p in prefixes]
        ).to(self.device)

    def test_step(
        self, batch: tuple[Any, Tensor], batch_idx: int, dataloader_idx: int = 0
    ) -> Encoded:
        return self._evaluate(batch, self.test_metrics[dataloader_idx])

    def predict_step(self, batch: Any, batch_idx: int) -> Tensor:
        x = batch[0] if isinstance(batch, list | tuple) else batch
        return self(x[0] if isinstance(x, list | tuple) else x)
