"""Supervised classifiers trained with cross entropy (CE) or non-negative CE (NCE).

NCE (Wang et al., "Non-negative Contrastive Learning", ICLR 2024, Sec. 6) applies the
non-negative constraint to supervised learning: the representation passes through a
non-negative map (ReLU) and the classifier weights are non-negative, so each class score
is a non-negative combination of non-negative features. The paper reports that NCE
learns faster early in training (Figure 4) and gives sparser, more interpretable
features at the same accuracy. Optionally an MLP projector sits between backbone and
classifier (paper: 512 -> 16384 -> 2048); its Table 4 also trains CE and NCE without
one, and NCE fine-tuned for 50 epochs from a CL (SimCLR) checkpoint (``pretrained``).
"""

from __future__ import annotations

from typing import Any, Literal

from torch import Tensor, nn

from ncl_lightning.checkpoints.load import load_backbone
from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.foundation.validation import check_at_least, check_choice, check_given
from ncl_lightning.methods.checks import check_backbone
from ncl_lightning.methods.classifier import Classifier
from ncl_lightning.methods.ssl import Encoded
from ncl_lightning.nn.heads import MLP, LinearClassifier
from ncl_lightning.nn.nonneg import NONNEG
from ncl_lightning.nn.protocols import Backbone


class NCEClassifier(Classifier):
    """Backbone -> (MLP projector) -> (non-negative map) -> (non-negative) linear classifier.

    ``loss: ce`` is the ordinary classifier; ``loss: nce`` adds the non-negative map on
    the representation and ``ReLU`` on the classifier weights. Evaluation steps return
    ``Encoded(h, z)`` with ``z`` the representation the classifier reads, so
    [`FeatureStatistics`][ncl_lightning.callbacks.FeatureStatistics] measures its sparsity and
    semantic consistency.

    Args:
        backbone: Encoder exposing ``out_dim``.
        num_classes: Number of classes (CLI-linked from the DataModule).
        loss: ``ce`` or ``nce``.
        nonneg: Non-negative map of the representation under ``nce`` (a ``NONNEG`` name).
        proj_hidden_dim: Projector hidden width (0: no projector).
        proj_output_dim: Projector output width (0: no projector).
        proj_num_layers: Linear layers of the projector.
        proj_batch_norm: BatchNorm after each hidden projector layer (default ``True``;
            the NCL paper does not say and its release has no NCE code; without it NCE
            reached 48.6 % on the digits demo after 10 epochs, 97.8 % with it).
        pretrained: A checkpoint of this package whose backbone weights initialise
            ``backbone`` (tensor-only loading); ``None`` trains from scratch.
        require_pretrained: Refuse to start without ``pretrained`` (a one-line
            ``ConfigError`` naming it): for configs that fine-tune a pretrained backbone
            (``configs/nce/*_nce_finetune.yaml``), which must not silently train from
            scratch.
        **kwargs: Optimisation settings of [`Classifier`][].
    """

    label = "classifier"

    def __init__(
        self,
        backbone: Backbone,
        num_classes: int = 0,
        loss: Literal["ce", "nce"] = "nce",
        nonneg: str = "relu",
        proj_hidden_dim: int = 0,
        proj_output_dim: int = 0,
        proj_num_layers: int = 2,
        proj_batch_norm: bool = True,
        pretrained: str | None = None,
        require_pretrained: bool = False,
        **kwargs: Any,
    ) -> None:
        if require_pretrained:  # before anything is built or loaded
            check_given(
                "pretrained",
                pretrained,
                "this config fine-tunes a pretrained backbone (require_pretrained: true); "
                "give --model.init_args.pretrained <a CL run's last.ckpt>",
            )
        super().__init__(num_classes=num_classes, **kwargs)
        check_choice("loss", loss, ("ce", "nce"))
        check_backbone(backbone)
        check_at_least("proj_hidden_dim", proj_hidden_dim, 0)
        check_at_least("proj_output_dim", proj_output_dim, 0)
        if (proj_hidden_dim > 0) != (proj_output_dim > 0):
            raise ConfigError(
                "set both proj_hidden_dim and proj_output_dim (> 0) for a projector, or "
                f"neither; got {proj_hidden_dim} and {proj_output_dim}"
            )
        if proj_output_dim > 0:
            check_at_least("proj_num_layers", proj_num_layers, 1)
        self.backbone = load_backbone(pretrained, backbone) if pretrained else backbone
        self.projector = (
            MLP(
                backbone.out_dim,
                proj_hidden_dim,
                proj_output_dim,
                proj_num_layers,
                proj_batch_norm,
            )
            if proj_output_dim > 0
            else nn.Identity()
        )
        width = proj_output_dim if proj_output_dim > 0 else backbone.out_dim
        self.nonneg = NONNEG.build(nonneg, config_key="nonneg") if loss == "nce" else nn.Identity()
        self.classifier = LinearClassifier(width, num_classes, nonneg_weights=loss == "nce")

    def encode(self, x: Tensor) -> Encoded:
        h = self.backbone(x)
        return Encoded(h=h, z=self.nonneg(self.projector(h)))

    def head(self, z: Tensor) -> Tensor:
        return self.classifier(z)
