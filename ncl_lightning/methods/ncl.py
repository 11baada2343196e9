"""NCL: Non-negative Contrastive Learning (Wang et al., ICLR 2024)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ncl_lightning.foundation.validation import check_range
from ncl_lightning.methods.cl import CL
from ncl_lightning.nn.nonneg import NONNEG
from ncl_lightning.nn.protocols import Backbone, TorchModule


class NCL(CL):
    """CL with a non-negative map on the projector output: ``z+ = σ+(g(f(x)))``.

    The loss is unchanged (``loss``: InfoNCE or spectral); only the features are constrained,
    which makes them sparse, near-orthogonal and semantically consistent (NCL, Sec. 5).

    Args:
        backbone: Encoder exposing ``out_dim``.
        nonneg: Registered name (``relu``, ``rep_relu``, ``softplus``, ``sigmoid``, ``exp``)
            or a module. CIFAR configs use ``rep_relu``, ImageNet configs ``relu``.
        **kwargs: Everything [`CL`][] takes.
    """

    def __init__(
        self, backbone: Backbone, nonneg: str | TorchModule = "rep_relu", **kwargs: Any
    ) -> None:
        super().__init__(backbone, **kwargs)
        self.nonneg = NONNEG.build(nonneg, config_key="nonneg")

    def features(self, p: Tensor) -> Tensor:
        return self.nonneg(p)


class NCLTopK(NCL):
    """NCL + TopK baseline of BayesNCL: keep the ``k`` largest activations of each sample.

    Args:
        backbone: Encoder exposing ``out_dim``.
        topk: Activations kept per sample (``1 <= topk <= proj_output_dim``).
        **kwargs: Everything [`NCL`][] takes.
    """

    def __init__(self, backbone: Backbone, topk: int = 32, **kwargs: Any) -> None:
        super().__init__(backbone, **kwargs)
        check_range("topk", topk, 1, self.projector.out_dim)
        self.topk = topk

    def features(self, p: Tensor) -> Tensor:
        z = super().features(p)
        keep = torch.zeros_like(z).scatter_(1, z.topk(self.topk, dim=1).indices, 1.0)
        return z * keep
