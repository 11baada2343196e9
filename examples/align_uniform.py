"""A new objective and a new non-negative map for NCL, in one small file.

Run it with the demo data:

    ncl-cli fit --config configs/demo/digits_ncl.yaml \
        --model examples.align_uniform.AlignUniformNCL --model.init_args.nonneg squared_relu \
        --trainer.default_root_dir runs/extending --trainer.logger.init_args.save_dir runs/extending

The loss is alignment + uniformity (Wang & Isola, "Understanding Contrastive Representation
Learning through Alignment and Uniformity on the Hypersphere", ICML 2020).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ncl_lightning.foundation.validation import check_at_least
from ncl_lightning.losses import view_pairs
from ncl_lightning.methods import NCL, Encoded
from ncl_lightning.nn import NONNEG


@NONNEG.register("squared_relu")
class SquaredReLU(nn.Module):
    """``relu(x)²``: non-negative with exact zeros, and a gradient that vanishes smoothly."""

    def forward(self, x: Tensor) -> Tensor:
        return torch.relu(x).pow(2)


def align_uniform(
    z1: Tensor, z2: Tensor, t: float = 2.0, weight: float = 1.0, gather_distributed: bool = True
) -> Tensor:
    """``E‖ẑ₁ − ẑ₂‖² + weight · log E exp(−t‖ẑ − ẑ'‖²)``, uniformity over the global batch.

    Args:
        z1: First view's features ``[n, d]``.
        z2: Second view's features ``[n, d]``.
        t: Uniformity kernel scale (the paper uses 2).
        weight: Weight of the uniformity term.
        gather_distributed: Take the keys of every rank under DDP.
    """
    pairs = view_pairs(F.normalize(z1, dim=1), F.normalize(z2, dim=1), gather_distributed)
    positives = pairs.keys[pairs.positive_index]  # [2n, d]: the other view of each query
    align = (pairs.queries - positives).pow(2).sum(dim=1).mean()
    uniform = torch.pdist(pairs.keys).pow(2).mul(-t).exp().mean().log()  # [2N] keys
    return align + weight * uniform


class AlignUniformNCL(NCL):
    """NCL features trained with alignment + uniformity instead of InfoNCE.

    Args:
        backbone: Encoder exposing ``out_dim``.
        uniformity_weight: Weight of the uniformity term.
        **kwargs: Everything :class:`~ncl_lightning.methods.NCL` takes.
    """

    def __init__(self, backbone: nn.Module, uniformity_weight: float = 1.0, **kwargs: Any) -> None:
        super().__init__(backbone, **kwargs)
        check_at_least("uniformity_weight", uniformity_weight, 0)
        self.uniformity_weight = uniformity_weight

    def objective(self, views: list[Encoded]) -> Tensor:
        return align_uniform(views[0].z, views[1].z, weight=self.uniformity_weight)
