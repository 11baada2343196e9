"""Measure what an atlas shows: stream a split through a model, shard by shard.

Each rank encodes samples ``rank::world_size`` of the clean split (the DataModule's
``clean_dataloader``), so every sample's dataset index is known and no sample is counted
twice; the metrics ([`FeatureProfile`][ncl_lightning.metrics.FeatureProfile], ``OpenFrequency``,
``SEPIN``) then reduce their states over the ranks, so every rank ends with what one process
measures on the whole split.
"""

from __future__ import annotations

from itertools import islice
from typing import Any, NamedTuple

import torch
from torch import Tensor, nn

from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.foundation.protocols import (
    ClassLabels,
    CleanData,
    PictureData,
    ViewData,
    require_extra,
)
from ncl_lightning.metrics import FeatureProfile, OpenFrequency
from ncl_lightning.metrics.functional.profile import DimensionProfile
from ncl_lightning.metrics.sepin import sepin_on_views


class SplitProfile(NamedTuple):
    """What [`profile_split`][] measured."""

    profile: DimensionProfile
    gate: Tensor | None  # [d] gate open frequency (BayesNCL), else None
    sepin: dict[str, Tensor] | None  # sepin@k scalars and the [d] "per_dimension" vector
    notes: list[str]  # what could not be measured, and why


def check_encoder(module: Any, space: str, where: str) -> None:
    """``ConfigError`` unless ``module`` has ``encode(images) -> Encoded`` and, for the
    ``z`` space, a projector (a probe's ``z`` is only its backbone output)."""
    name = type(module).__name__
    if not callable(getattr(module, "encode", None)):
        raise ConfigError(
            f"{where}: {name} has no encode(), so no features to browse; the atlas reads a "
            "CL, NCL, BayesNCL or NCE classifier checkpoint",
            key="checkpoint",
        )
    if space == "z" and not isinstance(getattr(module, "projector", None), nn.Module):
        raise ConfigError(
            f"{where}: {name} has no projector, so no projector features z; give the "
            "pretraining checkpoint, or browse its backbone features with space h",
            key="checkpoint",
        )


def features_of(out: Any, space: str, module: Any, where: str) -> Tensor:
    """The ``space`` field of ``module.encode``'s output, float32; ``ConfigError`` if absent."""
    if not isinstance(getattr(out, space, None), Tensor):
        fields = list(getattr(out, "_fields", [type(out).__name__]))
        raise ConfigError(
            f"{where}: {type(module).__name__}.encode() gives {fields}, no {space!r} features",
            key="space",
        )
    return getattr(out, space).float()


def check_atlas_data(datamodule: Any, where: str) -> None:
    """``ConfigError`` unless the DataModule has class labels, clean images
    (``clean_dataloader``) and pictures (``augmentation``)."""
    count = int(datamodule.num_classes) if isinstance(datamodule, ClassLabels) else 0
    if count < 1:
        raise ConfigError(
            f"{where}: {type(datamodule).__name__} has no class labels (num_classes "
            f"{count}); the atlas groups each dimension's samples by class",
            key="data",
        )
    require_extra(datamodule, CleanData, where, "clean_dataloader()", "data")
    require_extra(datamodule, PictureData, where, "augmentation", "data")


@torch.no_grad()
def _sepin(module: Any, datamodule: Any, split: str, rank: int, world: int, most: int | None,
           num_features: int) -> tuple[dict[str, Tensor] | None, str | None]:  # fmt: skip
    temperature = getattr(getattr(module, "hparams", {}), "temperature", None)
    if temperature is None:
        return None, f"SEPIN not measured: {type(module).__name__} has no InfoNCE temperature."
    if not isinstance(datamodule, ViewData):
        return None, f"SEPIN not measured: {type(datamodule).__name__} has no view pairs."
    loader = datamodule.view_dataloader(split, rank, world)
    return sepin_on_views(module, loader, temperature, num_features, most, True), None


@torch.no_grad()
def profile_split(
    module: Any,
    datamodule: Any,
    split: str,
    *,
    space: str = "z",
    eps: float = 1e-5,
    top_k: int = 16,
    sepin: bool = True,
    rank: int = 0,
    world_size: int = 1,
    most_batches: int | None = None,
) -> SplitProfile:
    """Profile every dimension of ``module``'s ``space`` features (``encode(x).<space>``;
    BayesNCL's gate ``mask`` too) on this rank's shard of ``split``: ``top_k`` samples per
    dimension, at most ``most_batches`` batches per loader, and SEPIN of ``z`` on view pairs
    when ``sepin`` (a note says why when it cannot be measured).

    Call it on every rank under DDP (the metrics' ``compute`` is a collective), on a module
    and data that passed ``check_encoder`` and ``check_atlas_data``.
    """
    where = f"FeatureAtlas({split})"
    classes = int(datamodule.num_classes)
    loader = datamodule.clean_dataloader(split, rank, world_size)
    profile: FeatureProfile | None = None
    gate: OpenFrequency | None = None
    seen = 0
    for images, labels in islice(loader, most_batches):
        out = module.encode(images.to(module.device))
        features = features_of(out, space, module, where)
        if profile is None:
            profile = FeatureProfile(features.shape[1], classes, eps, top_k).to(module.device)
            if hasattr(out, "mask"):
                gate = OpenFrequency(out.mask.shape[1]).to(module.device)
        index = rank + world_size * torch.arange(seen, seen + len(labels), device=module.device)
        profile.update(features, labels.to(module.device), index)
        if gate is not None:
            gate.update(out.mask)
        seen += len(labels)
    if profile is None:
        raise ConfigError(f"{where}: the {split} split has no samples", key="data")
    measured = profile.compute()
    notes: list[str] = []
    sepin_values = None
    if sepin and space == "z":
        d = measured.expected_activation.shape[0]
        sepin_values, why = _sepin(module, datamodule, split, rank, world_size, most_batches, d)
        notes += [why] if why else []
    open_freq = None
    if gate is not None:
        with gate.sync_context():  # the states of every rank
            open_freq = gate.frequency()
    return SplitProfile(measured, open_freq, sepin_values, notes)
