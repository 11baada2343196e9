"""Offline linear probe and full fine-tuning of a pretrained checkpoint, on ``h``, ``z`` or
``p`` (docs/evaluation.md).

``space: h`` (default) classifies the encoder output ``[B, D]`` (only the backbone is
rebuilt, [`ncl_lightning.load_backbone`][]); ``space: z`` the method's ``encode(x).z``
``[B, d]`` (after NCL's non-negative map and BayesNCL's gate); ``space: p`` the raw
projector output ``g(h)`` ``[B, d]`` before any map, what the NCL release's
``main_linear.py`` classifies for Table 7 (NCL paper App. F.4). For ``z`` and ``p`` the
whole method is rebuilt ([`ncl_lightning.load_method`][]). The probe freezes everything it
reads, BatchNorm statistics included; fine-tuning trains the encoder and the modules of the
space's path (``PATHS``), or the encoder alone with ``freeze_projector`` (the release).
Metrics: ``{stage}/offline_linear{,_z,_p}/acc_top{1,5}`` and ``{stage}/offline_finetune...``.
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

Space = Literal["h", "z", "p"]

SPACES: tuple[str, ...] = ("h", "z", "p")
"""The representations a probe can classify: encoder output ``h``, the method's features
``z`` (projector output after the non-negative map and gate), raw projector output ``p``."""

Z_PATH = ("backbone", "projector", "nonneg", "gating_head", "gate")
"""Sub-modules of a method on the way from the image to ``z``."""

PATHS: dict[str, tuple[str, ...]] = {
    "h": ("backbone",),
    "z": Z_PATH,
    "p": ("backbone", "projector"),
}
"""Sub-modules on the way from the image to each space: what ``FineTune`` trains (those the
method has), less all but ``backbone`` with ``freeze_projector``."""


def z_width(method: L.LightningModule, checkpoint: str, space: str = "z") -> int:
    """Width ``d`` of ``method.encode(x).z`` (and of the projector output ``p``) ``[B, d]``:
    its projector's ``out_dim``; a ``ConfigError`` naming ``checkpoint`` when there is none
    (a probe or kNN checkpoint, NCE without a projector) or no ``encode``."""
    width = getattr(getattr(method, "projector", None), "out_dim", None)
    if not callable(getattr(method, "encode", None)) or not isinstance(width, int):
        raise ConfigError(
            f"space: {space} needs a projector output, but {checkpoint} holds a "
            f"{type(method).__name__} without a projector; use space: h",
            key="space",
        )
    return width


def encode_space(method: L.LightningModule, x: Tensor, space: str) -> Encoded:
    """Images ``[B, C, H, W]`` to ``Encoded(h [B, D], features)`` through a rebuilt method,
    ``features`` being ``h`` itself, ``z = method.encode(x).z`` ``[B, d]`` or the raw
    projector output ``p = method.projector(h)`` ``[B, d]`` (no map, no gate)."""
    if space == "z":
        out = method.encode(x)
        return Encoded(h=out.h, z=out.z)
    h = method.backbone(x)
    return Encoded(h=h, z=method.projector(h) if space == "p" else h)


class LinearProbe(Classifier):
    """Linear classifier on the frozen ``h``, ``z`` or ``p`` of a pretrained checkpoint.

    Args:
        checkpoint: Pretrained checkpoint (CL, NCL, BayesNCL, NCE, ...).
        num_classes: Number of classes (CLI-linked from the DataModule).
        space: ``h``: encoder output ``[B, D]`` (main tables); ``z``: the method's
            features ``method.encode(x).z`` ``[B, d]`` (after NCL's map, BayesNCL's gate;
            the paper's text for Table 7, "NCL (w/ ReLU)"); ``p``: the raw projector output
            ``[B, d]`` before the map (Table 7's rows "w/o ReLU", and the NCL release's
            ``main_linear.py``, which applies the loaded projector and nothing after it).
        **kwargs: Optimisation settings of [`Classifier`][ncl_lightning.methods.Classifier]
            (paper settings: SGD or LARS, 50-100 epochs, warmup-cosine).

    Attributes:
        label: ``offline_linear`` (``offline_finetune``), with ``_z`` or ``_p`` for those
            spaces: the metric prefix.
        method: The whole pretrained method (``space: z`` or ``p`` only); ``backbone`` is
            its backbone.

    Raises:
        ConfigError: ``space`` is not one of ``SPACES``, or ``space: z``/``p`` on a
            checkpoint without a projector.

    Example:
        ``ncl-cli fit --config configs/eval/cifar10_linear.yaml --model.checkpoint last.ckpt
        --model.init_args.space p``
    """

    label = "offline_linear"

    def __init__(
        self,
        checkpoint: str,
        num_classes: int = 0,
        space: Space = "h",
        **kwargs: Any,
    ) -> None:
        check_choice("space", space, SPACES)
        # Set before Classifier.__init__, which names its metrics after the label.
        self.label = type(self).label + ("" if space == "h" else f"_{space}")
        super().__init__(num_classes=num_classes, **kwargs)
        self.space = space
        if space == "h":
            self.backbone = load_backbone(checkpoint)
            self.backbone.requires_grad_(False)
            width = self.backbone.out_dim
        else:
            method = load_method(checkpoint)
            width = z_width(method, checkpoint, space)
            method.requires_grad_(False)
            # load_method returns eval mode and Lightning keeps modules' modes at fit: train
            # mode, as load_backbone's, for fine-tuning (BatchNorm batch statistics, the
            # gate's training mask); `encode` puts the frozen parts in eval mode.
            method.train()
            self.method = method
            # The same module again: the checkpoint's `backbone.*` keys, which load_backbone
            # reads, hold the encoder of a probe on z or p too.
            self.backbone = method.backbone
        self.classifier = LinearClassifier(width, num_classes)

    def trained_parts(self) -> tuple[str, ...]:
        """Names of the sub-modules (of ``method``; ``backbone`` for ``h``) this protocol
        trains: none for the probe."""
        return ()

    def frozen_modules(self) -> list[nn.Module]:
        """The modules on the way to the space that stay frozen (kept in eval mode)."""
        trained = self.trained_parts()
        if self.space == "h":
            return [] if trained else [self.backbone]
        if not trained:
            return [self.method]
        return [
            part
            for name in PATHS[self.space]
            if name not in trained
            and isinstance(part := getattr(self.method, name, None), nn.Module)
        ]

    def backbone_spec(self) -> dict[str, Any] | None:
        """The pretrained backbone's ``{"class_path", "init_args"}`` (checkpoint record)."""
        if self.space != "h":
            return self.method.backbone_spec()
        return super().backbone_spec()

    def encode(self, x: Tensor) -> Encoded:
        """Images ``[B, C, H, W]`` to ``Encoded(h [B, D], z)``: ``z`` is what the head
        classifies, ``h`` itself for ``space: h``, the method's ``z`` ``[B, d]`` for ``z``,
        the raw projector output ``[B, d]`` for ``p``."""
        for module in self.frozen_modules():
            if module.training:
                # Lightning restores per-module train modes around validation, so enforce
                # the frozen modules' eval mode here: BatchNorm statistics must not move.
                module.eval()
        with torch.set_grad_enabled(bool(self.trained_parts()) and torch.is_grad_enabled()):
            if self.space == "h":
                h = self.backbone(x)
                return Encoded(h=h, z=h)
            return encode_space(self.method, x, self.space)

    def head(self, z: Tensor) -> Tensor:
        return self.classifier(z)


class FineTune(LinearProbe):
    """Fine-tune the pretrained encoder (and, for ``z``/``p``, the projector unless
    ``freeze_projector``) with a new linear classifier.

    Args:
        checkpoint: Pretrained checkpoint.
        num_classes: Number of classes (CLI-linked).
        space: ``h`` (encoder output), ``z`` (the method's features) or ``p`` (raw
            projector output); see [`LinearProbe`][ncl_lightning.evaluation.LinearProbe].
        freeze_projector: For ``z`` and ``p``: train the encoder alone, through the frozen
            projector (and map and gate), as the NCL release's ``main_linear.py`` does for
            Table 7 (its projector's ``requires_grad`` is off and it is not among the
            optimised modules). ``False`` (default): the modules of ``PATHS[space]`` train.
        **kwargs: Optimisation settings of [`Classifier`][ncl_lightning.methods.Classifier].

    Raises:
        ConfigError: ``freeze_projector`` with ``space: h`` (no projector on the way).
    """

    label = "offline_finetune"

    def __init__(
        self,
        checkpoint: str,
        num_classes: int = 0,
        space: Space = "h",
        freeze_projector: bool = False,
        **kwargs: Any,
    ) -> None:
        if freeze_projector and space == "h":
            raise ConfigError(
                "freeze_projector needs space: z or p (space h reads no projector)",
                key="freeze_projector",
            )
        self.freeze_projector = freeze_projector
        super().__init__(checkpoint, num_classes, space, **kwargs)
        root = self if space == "h" else self.method
        for name in self.trained_parts():
            part = getattr(root, name, None)
            if isinstance(part, nn.Module):
                part.requires_grad_(True)

    def trained_parts(self) -> tuple[str, ...]:
        """``backbone`` with ``freeze_projector``, else the names of ``PATHS[space]``."""
        return ("backbone",) if self.freeze_projector else PATHS[self.space]
