"""Offline linear probe and full fine-tuning of a pretrained checkpoint, on ``h`` or ``z``
(docs/evaluation.md).

``space: h`` (default) classifies the encoder output ``[B, D]`` (only the backbone is
rebuilt, [`ncl_lightning.load_backbone`][]); ``space: z`` the method's ``encode(x).z``
``[B, d]`` (the whole method is rebuilt, [`ncl_lightning.load_method`][]; NCL paper, Table
7). The probe freezes everything it reads, BatchNorm statistics included; fine-tuning
trains the encoder and, for ``z``, the modules of ``Z_PATH``. Metrics:
``{stage}/offline_linear{,_z}/acc_top{1,5}`` and ``{stage}/offline_finetune{,_z}/...``.
"""

from __future__ import annotations

from typing import Any, Literal

import lightning as L
import torch
from torch import Tensor, nn

from ncl_lightning.checkpoints.load import load_backbone, load_method
from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.foundation.validation import check_choice
from ncl_lightning.methods.classifier import Classifier
from ncl_lightning.methods.ssl import Encoded
from ncl_lightning.nn.heads import LinearClassifier

SPACES = ("h", "z")
"""The representations a probe can classify: encoder output ``h``, projector output ``z``."""

Z_PATH = ("backbone", "projector", "nonneg", "gating_head", "gate")
"""Sub-modules of a method on the way from the image to ``z``: what ``FineTune`` trains
with ``space: z`` (those the method has)."""


def z_width(method: L.LightningModule, checkpoint: str) -> int:
    """Width ``d`` of ``method.encode(x).z`` ``[B, d]``: its projector's ``out_dim``; a
    ``ConfigError`` naming ``checkpoint`` when there is none (a probe or kNN checkpoint,
    NCE without a projector) or no ``encode``."""
    width = getattr(getattr(method, "projector", None), "out_dim", None)
    if not callable(getattr(method, "encode", None)) or not isinstance(width, int):
        raise ConfigError(
            f"space: z needs a projector output, but {checkpoint} holds a "
            f"{type(method).__name__} without a projector; use space: h",
            key="space",
        )
    return width


class LinearProbe(Classifier):
    """Linear classifier on the frozen ``h`` or ``z`` of a pretrained checkpoint.

    Args:
        checkpoint: Pretrained checkpoint (CL, NCL, BayesNCL, NCE, ...).
        num_classes: Number of classes (CLI-linked from the DataModule).
        space: ``h``: encoder output ``[B, D]`` (main tables); ``z``: the method's
            projector output ``method.encode(x).z`` ``[B, d]`` (NCL paper, Table 7).
        **kwargs: Optimisation settings of [`Classifier`][ncl_lightning.methods.Classifier]
            (paper settings: SGD or LARS, 50-100 epochs, warmup-cosine).

    Attributes:
        label: ``offline_linear`` (``offline_finetune``), with ``_z`` for ``space: z``:
            the metric prefix.
        method: The whole pretrained method (``space: z`` only); ``backbone`` is its
            backbone.

    Raises:
        ConfigError: ``space`` is not ``h`` or ``z``, or ``space: z`` on a checkpoint
            without a projector.

    Example:
        ``ncl-cli fit --config configs/eval/cifar10_linear.yaml --model.checkpoint last.ckpt
        --model.init_args.space z``
    """

    label = "offline_linear"
    trains_backbone = False

    def __init__(
        self,
        checkpoint: str,
        num_classes: int = 0,
        space: Literal["h", "z"] = "h",
        **kwargs: Any,
    ) -> None:
        check_choice("space", space, SPACES)
        # Set before Classifier.__init__, which names its metrics after the label.
        self.label = type(self).label + ("_z" if space == "z" else "")
        super().__init__(num_classes=num_classes, **kwargs)
        self.space = space
        if space == "z":
            method = load_method(checkpoint)
            width = z_width(method, checkpoint)
            method.requires_grad_(False)
            # load_method returns eval mode and Lightning keeps modules' modes at fit: train
            # mode, as load_backbone's, for fine-tuning (BatchNorm batch statistics, the
            # gate's training mask); the probe's encode puts it in eval mode.
            method.train()
            if self.trains_backbone:
                for name in Z_PATH:
                    part = getattr(method, name, None)
                    if isinstance(part, nn.Module):
                        part.requires_grad_(True)
            self.method = method
            # The same module again: the checkpoint's `backbone.*` keys, which load_backbone
            # reads, hold the encoder of a probe on z too.
            self.backbone = method.backbone
        else:
            self.backbone = load_backbone(checkpoint)
            self.backbone.requires_grad_(self.trains_backbone)
            width = self.backbone.out_dim
        self.classifier = LinearClassifier(width, num_classes)

    def backbone_spec(self) -> dict[str, Any] | None:
        """The pretrained backbone's ``{"class_path", "init_args"}`` (checkpoint record)."""
        if self.space == "z":
            return self.method.backbone_spec()
        return super().backbone_spec()

    def encode(self, x: Tensor) -> Encoded:
        """Images ``[B, C, H, W]`` to ``Encoded(h [B, D], z)``: ``z`` is what the head
        classifies, ``h`` itself for ``space: h``, the method's ``z`` ``[B, d]`` for ``z``."""
        frozen = self.method if self.space == "z" else self.backbone
        if not self.trains_backbone and frozen.training:
            # Lightning restores per-module train modes around validation, so enforce the
            # frozen modules' eval mode here: BatchNorm statistics must not move.
            frozen.eval()
        with torch.set_grad_enabled(self.trains_backbone and torch.is_grad_enabled()):
            if self.space == "z":
                out = self.method.encode(x)
                return Encoded(h=out.h, z=out.z)
            h = self.backbone(x)
        return Encoded(h=h, z=h)

    def head(self, z: Tensor) -> Tensor:
        return self.classifier(z)


class FineTune(LinearProbe):
    """Fine-tune the pretrained encoder (and, for ``z``, the projector) with a new linear
    classifier.

    Args:
        checkpoint: Pretrained checkpoint.
        num_classes: Number of classes (CLI-linked).
        space: ``h`` (encoder output) or ``z`` (projector output, NCL paper Table 7;
            the modules of ``Z_PATH`` are trained too).
        **kwargs: Optimisation settings of [`Classifier`][ncl_lightning.methods.Classifier].
    """

    label = "offline_finetune"
    trains_backbone = True
