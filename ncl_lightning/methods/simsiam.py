"""SimSiam: Siamese representation learning with a stop-gradient (Chen & He, CVPR 2021)."""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn

from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.foundation.validation import check_at_least
from ncl_lightning.losses import symmetric_negative_cosine
from ncl_lightning.methods.checks import check_projector
from ncl_lightning.methods.ssl import Encoded, SSLMethod
from ncl_lightning.nn.heads import MLP
from ncl_lightning.nn.protocols import Backbone


def optional_mlp(in_dim: int, hidden_dim: int, out_dim: int, num_layers: int) -> nn.Module:
    """``MLP`` with ``num_layers`` linear layers, or ``Identity`` (width ``in_dim``) for 0."""
    check_at_least("num_layers", num_layers, 0)
    if num_layers == 0:
        identity = nn.Identity()
        identity.out_dim = in_dim  # type: ignore[assignment]
        return identity
    return MLP(in_dim, hidden_dim, out_dim, num_layers)


class SimSiam(SSLMethod):
    """Projector ``g`` on the backbone, predictor ``q``: ``½D(q(z₁), sg z₂) + ½D(q(z₂), sg z₁)``.

    No negatives: the stop-gradient on the target branch (and, in practice, the predictor)
    is what avoids collapse. ``D`` is the negative cosine
    (``ncl_lightning.losses.negative_cosine``). Subclasses change the targets with
    [`targets`][] (BYOL's momentum encoder).

    The sparse-coding study (Pokle et al., AISTATS 2022, Table 1) builds its SimSiam as
    encoder → projector → linear predictor: the projector is the encoder's second layer
    (``SparseCodingEncoder(second_layer=True)``), so ``proj_num_layers: 0`` here, and
    ``pred_num_layers: 1``; its encoder-only ablation has neither.

    Args:
        backbone: Encoder exposing ``out_dim``.
        proj_hidden_dim: Projector hidden width (SimSiam CIFAR: 2048).
        proj_output_dim: Projector output width (SimSiam CIFAR: 2048).
        proj_num_layers: Linear layers of the projector (0: no projector, ``z = h``).
        pred_hidden_dim: Predictor bottleneck width (SimSiam: 512).
        pred_num_layers: Linear layers of the predictor (0: none, 1: linear, 2: SimSiam).
        **kwargs: Optimisation and online-evaluation settings of [`SSLMethod`][].
    """

    compile_targets = ("backbone", "projector", "predictor")

    def __init__(
        self,
        backbone: Backbone,
        proj_hidden_dim: int = 2048,
        proj_output_dim: int = 2048,
        proj_num_layers: int = 3,
        pred_hidden_dim: int = 512,
        pred_num_layers: int = 2,
        **kwargs: Any,
    ) -> None:
        super().__init__(backbone, **kwargs)
        check_projector(proj_hidden_dim, proj_output_dim, proj_num_layers, low_layers=0)
        check_at_least("pred_num_layers", pred_num_layers, 0)
        if pred_num_layers > 1:
            check_at_least("pred_hidden_dim", pred_hidden_dim, 1)
        self.projector = optional_mlp(
            backbone.out_dim, proj_hidden_dim, proj_output_dim, proj_num_layers
        )
        width = self.projector.out_dim
        self.predictor = optional_mlp(width, pred_hidden_dim, width, pred_num_layers)

    def encode(self, x: Tensor) -> Encoded:
        h = self.backbone(x)
        return Encoded(h=h, z=self.projector(h))

    def targets(self, views: list[Encoded]) -> list[Tensor]:
        """Target features of each view ``[B, d]`` (SimSiam: the online ``z``; the loss
        detaches them)."""
        return [v.z for v in views]

    def objective(self, views: list[Encoded]) -> Tensor:
        if len(views) != 2:
            raise ConfigError(f"{type(self).__name__} expects 2 views per image, got {len(views)}")
        p1, p2 = (self.predictor(v.z) for v in views)
        z1, z2 = self.targets(views)
        return symmetric_negative_cosine(p1, p2, z1, z2)
