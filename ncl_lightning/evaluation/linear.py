"""Offline linear probe and full fine-tuning of a pretrained backbone.

Both start from any checkpoint the package writes ([`ncl_lightning.load_backbone`][],
tensor-only loading) and classify the *encoder* output ``h`` (not the projector), the
protocol of SimCLR, NCL and BayesNCL. The probe freezes the backbone entirely: weights,
and BatchNorm statistics (it stays in eval mode), so only the linear layer learns.
Fine-tuning trains everything (NCL paper: 30 epochs).

Metrics are logged as ``{stage}/offline_linear/acc_top{1,5}`` and
``{stage}/offline_finetune/acc_top{1,5}``, distinct from the ``online`` probe of
pre-training.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ncl_lightning.checkpoints.load import load_backbone
from ncl_lightning.methods.classifier import Classifier
from ncl_lightning.methods.ssl import Encoded
from ncl_lightning.nn.heads import LinearClassifier


class LinearProbe(Classifier):
    """Linear classifier on the frozen encoder of a pretrained checkpoint.

    Args:
        checkpoint: Pretrained checkpoint (CL, NCL, BayesNCL, NCE, ...).
        num_classes: Number of classes (CLI-linked from the DataModule).
        **kwargs: Optimisation settings of [`Classifier`][ncl_lightning.methods.Classifier]
            (paper settings: SGD or LARS, 50-100 epochs, warmup-cosine).

    Example:
        ``ncl-cli fit --config configs/eval/cifar10_linear.yaml --model.checkpoint last.ckpt``
    """

    label = "offline_linear"
    trains_backbone = False

    def __init__(self, checkpoint: str, num_classes: int = 0, **kwargs: Any) -> None:
        super().__init__(num_classes=num_classes, **kwargs)
        self.backbone = load_backbone(checkpoint)
        self.backbone.requires_grad_(self.trains_backbone)
        self.classifier = LinearClassifier(self.backbone.out_dim, num_classes)

    def encode(self, x: Tensor) -> Encoded:
        if not self.trains_backbone and self.backbone.training:
            # Lightning restores per-module train modes around validation, so enforce the
            # frozen backbone's eval mode here: BatchNorm statistics must not move.
            self.backbone.eval()
        with torch.set_grad_enabled(self.trains_backbone and torch.is_grad_enabled()):
            h = self.backbone(x)
        return Encoded(h=h, z=h)

    def head(self, z: Tensor) -> Tensor:
        return self.classifier(z)


class FineTune(LinearProbe):
    """Fine-tune the whole pretrained encoder with a new linear classifier.

    Args:
        checkpoint: Pretrained checkpoint.
        num_classes: Number of classes (CLI-linked).
        **kwargs: Optimisation settings of [`Classifier`][ncl_lightning.methods.Classifier].
    """

    label = "offline_finetune"
    trains_backbone = True
