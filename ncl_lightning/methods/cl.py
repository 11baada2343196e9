"""CL: SimCLR-style contrastive learning (Chen et al., ICML 2020)."""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn

from ncl_lightning.losses import OBJECTIVES
from ncl_lightning.methods.base import Encoded, SSLMethod
from ncl_lightning.methods.checks import check_projector
from ncl_lightning.nn.heads import MLP
from ncl_lightning.runtime.errors import ConfigError
from ncl_lightning.runtime.validation import check_positive


class CL(SSLMethod):
    """Backbone -> MLP projector -> (L2-normalised in the loss) -> InfoNCE or spectral loss.

    Subclasses change the features with :meth:`features` (NCL's non-negative map) or the
    loss with :meth:`objective`; the training step is inherited unchanged.

    Args:
        backbone: Encoder exposing ``out_dim``.
        proj_hidden_dim: Projector hidden width (CIFAR: 2048).
        proj_output_dim: Projector output width ``d`` (CIFAR: 256).
        proj_num_layers: Linear layers in the projector.
        objective: Registered objective name (``info_nce``, ``spectral``) or a module
            ``(z1 [n, d], z2 [n, d]) -> loss``.
        temperature: InfoNCE temperature (CIFAR: 0.2); unused by ``spectral``.
        gather_distributed: Take negatives from every rank under DDP.
        **kwargs: Optimisation and online-evaluation settings of :class:`SSLMethod`.
    """

    def __init__(
        self,
        backbone: nn.Module,
        proj_hidden_dim: int = 2048,
        proj_output_dim: int = 256,
        proj_num_layers: int = 2,
        objective: str | nn.Module = "info_nce",
        temperature: float = 0.2,
        gather_distributed: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(backbone, **kwargs)
        check_positive("temperature", temperature)
        check_projector(proj_hidden_dim, proj_output_dim, proj_num_layers)
        self.projector = MLP(backbone.out_dim, proj_hidden_dim, proj_output_dim, proj_num_layers)
        self.loss_fn = OBJECTIVES.build(
            objective,
            config_key="objective",
            temperature=temperature,
            gather_distributed=gather_distributed,
        )

    def features(self, p: Tensor) -> Tensor:
        """Map projector outputs ``[B, d]`` to the features ``z``; identity for CL."""
        return p

    def encode(self, x: Tensor) -> Encoded:
        h = self.backbone(x)
        return Encoded(h=h, z=self.features(self.projector(h)))

    def objective(self, views: list[Encoded]) -> Tensor:
        if len(views) != 2:
            raise ConfigError(f"{type(self).__name__} expects 2 views per image, got {len(views)}")
        return self.loss_fn(views[0].z, views[1].z)
