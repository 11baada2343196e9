"""Contrastive objectives: pure functions, thin module wrappers and a name registry.

``OBJECTIVES`` maps a config name (a method's ``loss`` argument) to a loss class, or a
factory, called with the method's ``temperature`` and ``gather_distributed`` as keywords;
register a new objective with ``OBJECTIVES.register("name")`` on such a class or factory.
The supervised contrastive loss (``supcon``) also takes labels, so it is used by the SupCon
methods directly. [`view_pairs`][] gives a new contrastive loss the layout every one of them
shares (queries, keys gathered across ranks, positive and self columns).
"""

from __future__ import annotations

from torch import nn

from ncl_lightning.foundation.registry import Registry
from ncl_lightning.losses.info_nce import InfoNCELoss, info_nce
from ncl_lightning.losses.non_contrastive import negative_cosine, symmetric_negative_cosine
from ncl_lightning.losses.pairs import ViewPairs, pair_indices, view_pairs
from ncl_lightning.losses.sparsity import (
    InfoNCEL1Loss,
    SpectralL1Loss,
    feature_l1,
    info_nce_l1,
    l1_penalty,
    spectral_l1,
)
from ncl_lightning.losses.spectral import (
    SPECTRAL_NORMALIZATIONS,
    SpectralContrastiveLoss,
    spectral_contrastive,
)
from ncl_lightning.losses.supcon import SupConLoss, supcon

OBJECTIVES: Registry[nn.Module] = Registry("objective")
"""Losses ``(*, temperature, gather_distributed) -> nn.Module`` by config name
(``model.init_args.loss``): ``"info_nce"``, ``"info_nce_l1"`` (InfoNCE + λ·mean ‖ẑ‖₁ at
the default λ; give [`InfoNCEL1Loss`][ncl_lightning.losses.InfoNCEL1Loss] by ``class_path``
to set it), ``"spectral"`` (unit rows; give
[`SpectralContrastiveLoss`][ncl_lightning.losses.SpectralContrastiveLoss] by ``class_path``
for HaoChen et al.'s ``normalize: ball``, and
[`SpectralL1Loss`][ncl_lightning.losses.SpectralL1Loss] for the NCL paper's "SCL + reg")."""
OBJECTIVES.add("info_nce", InfoNCELoss)
OBJECTIVES.add("info_nce_l1", InfoNCEL1Loss)


@OBJECTIVES.register("spectral")
def _spectral(temperature: float, gather_distributed: bool) -> nn.Module:
    del temperature  # the spectral loss has no temperature
    return SpectralContrastiveLoss(gather_distributed)


__all__ = [
    "OBJECTIVES",
    "SPECTRAL_NORMALIZATIONS",
    "InfoNCEL1Loss",
    "InfoNCELoss",
    "SpectralContrastiveLoss",
    "SpectralL1Loss",
    "SupConLoss",
    "ViewPairs",
    "feature_l1",
    "info_nce",
    "info_nce_l1",
    "l1_penalty",
    "negative_cosine",
    "pair_indices",
    "spectral_contrastive",
    "spectral_l1",
    "supcon",
    "symmetric_negative_cosine",
    "view_pairs",
]
