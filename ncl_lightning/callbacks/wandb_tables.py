"""What the W&B logger adds to a run's dashboard: axes and summaries per key, and the
per-dimension table.

* [`metric_definition`][]: the ``define_metric`` arguments of a logged key. ``train/…``
  and ``lr-…`` keys are plotted against ``trainer/global_step``, ``val/…`` and ``test/…``
  keys against ``epoch`` (``step_sync``: a row without ``epoch``, a picture's, gets the last
  one). The run summary keeps the best value besides the last, in the direction the
  metric's own ``higher_is_better`` gives ([`METRICS`][]; losses: the minimum).
* [`dimension_table`][]: a ``wandb.Table`` of the per-dimension statistics of ``z`` that
  [`FeatureStatistics`][ncl_lightning.callbacks.FeatureStatistics] measured, with the
  top-activating images that [`TopActivations`][ncl_lightning.callbacks.TopActivations]
  drew, one row per dimension, by decreasing expected activation.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from torchmetrics import Metric
from torchmetrics.classification import MulticlassAccuracy

from ncl_lightning.metrics import (
    SEPIN,
    ActiveDimensions,
    EffectiveRank,
    MutualInformationGap,
    OrthogonalityError,
    RetrievalPrecision,
    SemanticConsistency,
    SemanticEntropy,
    Sparsity,
)

STEP_AXIS = "trainer/global_step"
EPOCH_AXIS = "epoch"
AXES = (STEP_AXIS, EPOCH_AXIS)
EPOCH_PREFIXES = ("val/", "test/")
METRICS: dict[str, type[Metric]] = {
    "sparsity": Sparsity,
    "active_dims": ActiveDimensions,
    "orthogonality_error": OrthogonalityError,
    "effective_rank": EffectiveRank,
    "semantic_consistency": SemanticConsistency,
    "semantic_entropy": SemanticEntropy,
    "retrieval_p@": RetrievalPrecision,
    "sepin": SEPIN,
    "mig": MutualInformationGap,
}
"""The start of a key's last segment -> the metric logged under it; an ``acc`` word
(``online_acc``, ``acc_top1``) is a ``MulticlassAccuracy``."""
LOSSES = ("loss", "objective")
"""Parts of a key's last segment that name a loss: its summary is the min."""
COLUMNS = {
    "ea": "EA",
    "frequency": "activation frequency",
    "consistency": "consistency",
    "majority_class": "majority class",
    "sepin": "SEPIN",
}
"""Per-dimension vectors of ``FeatureStatistics.dimensions`` -> table column, in order."""
IMAGES = "top images"


def metric_definition(key: str) -> dict[str, Any] | None:
    """The ``run.define_metric(key, **definition)`` arguments of a logged key, or None for
    the axes and W&B's own ``_…`` keys.

    Example:
        >>> metric_definition("val/z/semantic_consistency")
        {'step_metric': 'epoch', 'step_sync': True, 'summary': 'max,last'}
        >>> metric_definition("train/loss")["summary"]
        'min,last'
    """
    if key in AXES or key.startswith("_"):
        return None
    axis = EPOCH_AXIS if key.startswith(EPOCH_PREFIXES) else STEP_AXIS
    out: dict[str, Any] = {"step_metric": axis, "step_sync": True}
    name = key.rsplit("/", 1)[-1]
    higher = higher_is_better(name)
    if higher is not None:
        out["summary"] = "max,last" if higher else "min,last"
    return out


def higher_is_better(name: str) -> bool | None:
    """Whether the metric logged under ``name`` (a key's last segment) is better when
    higher: its class's ``higher_is_better``; ``False`` for a loss, ``None`` if unknown."""
    if "acc" in name.split("_"):
        return MulticlassAccuracy.higher_is_better
    metric = next((m for start, m in METRICS.items() if name.startswith(start)), None)
    if metric is not None:
        return metric.higher_is_better
    return False if any(part in name for part in LOSSES) else None


def _cell(value: Any, name: str) -> Any:
    """A table cell: None (W&B shows it empty) for NaN and for the majority class -1 of a
    dimension never activated."""
    if isinstance(value, float) and math.isnan(value):
        return None
    return None if name == "majority_class" and value < 0 else value


def dimension_rows(
    columns: Mapping[str, Sequence[Any]], images: Mapping[int, Any] | None = None
) -> tuple[list[str], list[list[Any]]]:
    """``(header, rows)`` of the per-dimension table, by decreasing EA (ties: lower dim).

    Args:
        columns: ``name -> [d] values`` with at least ``ea`` (the names of
            [`COLUMNS`][ncl_lightning.callbacks.wandb_tables.COLUMNS]; unknown names follow).
        images: ``dim -> picture`` for the dimensions that have one (the cell is None
            elsewhere); no image column if None or empty.
    """
    names = [n for n in COLUMNS if n in columns] + [n for n in columns if n not in COLUMNS]
    d = len(columns["ea"])
    order = sorted(range(d), key=lambda i: (-float(columns["ea"][i]), i))
    header = ["dim", *(COLUMNS.get(n, n) for n in names)] + ([IMAGES] if images else [])
    rows = []
    for i in order:
        row = [i, *(_cell(columns[n][i], n) for n in names)]
        rows.append(row + ([images.get(i)] if images else []))
    return header, rows


def dimension_table(
    columns: Mapping[str, Sequence[Any]], images: Mapping[int, np.ndarray] | None = None
) -> Any:
    """The ``wandb.Table`` of [`dimension_rows`][]; each picture ``[H, W, 3]`` uint8 becomes
    a ``wandb.Image``."""
    import wandb  # the logger's own dependency, imported where it is used

    pictures = {dim: wandb.Image(pixels) for dim, pixels in (images or {}).items()}
    header, rows = dimension_rows(columns, pictures)
    return wandb.Table(columns=header, data=rows)
