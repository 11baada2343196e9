"""One model's entry of the atlas document (see [`ncl_lightning.atlas.schema`][])."""

from __future__ import annotations

import math
from typing import Any

from torch import Tensor

from ncl_lightning.atlas.collect import SplitProfile
from ncl_lightning.metrics.functional import (
    semantic_consistency_from_counts,
    semantic_entropy_from_counts,
)


def _num(value: float | Tensor) -> float | None:
    """A JSON number: ``None`` for NaN or infinity (JSON has neither)."""
    value = float(value)
    return value if math.isfinite(value) else None


def strip_indices(measured: SplitProfile, eps: float) -> list[list[int]]:
    """Per dimension, the dataset indices of its strip: top samples with ``ẑ_i > eps``."""
    profile = measured.profile
    keep = (profile.top_index >= 0) & (profile.top_values > eps)  # [k, d]
    return [
        [int(i) for i in profile.top_index[keep[:, j], j].tolist()]
        for j in range(profile.top_index.shape[1])
    ]


def summary_metrics(measured: SplitProfile) -> dict[str, float]:
    """The header table: the project's metric definitions on the profile's sums."""
    p = measured.profile
    live = ~p.dead
    d = live.numel()
    metrics: dict[str, Any] = {
        "sparsity": 1.0 - float(p.frequency.mean()),  # mean per-sample zero share
        "active_dims": int(live.sum()),
        "dead_dims": int(d - live.sum()),
    }
    if live.any():
        metrics["semantic_consistency"] = float(semantic_consistency_from_counts(p.class_counts))
        metrics["semantic_entropy"] = float(semantic_entropy_from_counts(p.class_mass, live))
    if measured.sepin is not None:
        metrics |= {k: float(v) for k, v in measured.sepin.items() if k.startswith("sepin@")}
    if measured.gate is not None:
        metrics["gate_open_rate"] = float(measured.gate.mean())
    return {k: v for k, v in metrics.items() if _num(v) is not None}


def model_notes(measured: SplitProfile, num_classes: int) -> list[str]:
    """Warnings for the page header: a one-class split, a model with no live dimension."""
    notes = list(measured.notes)
    d = int(measured.profile.dead.numel())
    if num_classes == 1:
        notes.append(
            "The split has one class: every live dimension is 100% consistent by "
            "construction, so consistency, H_s and the class histograms say nothing here."
        )
    if bool(measured.profile.dead.all()):
        notes.append(
            f"All {d} dimensions are dead on this split: no sample activates any of them "
            "(|ẑ_i| > eps); there is nothing to browse."
        )
    return notes


def model_entry(
    measured: SplitProfile,
    *,
    key: str,
    name: str,
    info: dict[str, Any],
    class_names: list[str],
    eps: float,
    images: dict[str, Any],
    tops: list[list[int]],
    top_labels: list[list[int]] | None = None,
    accuracy: float | None = None,
) -> dict[str, Any]:
    """The ``MODEL`` document of [`schema`][ncl_lightning.atlas.schema] (``info``: its
    ``method``, ``checkpoint``, ``data``, ``split`` and ``space``; ``tops``: what
    [`strip_indices`][] gives, ``top_labels`` their classes)."""
    p = measured.profile
    metrics = summary_metrics(measured)
    if accuracy is not None and _num(accuracy) is not None:
        metrics["accuracy"] = float(accuracy)
    values = [row[: len(t)] for row, t in zip(p.top_values.T.tolist(), tops, strict=True)]
    return {
        "key": key,
        "name": name,
        **info,
        "num_samples": int(p.num_samples),
        "num_features": int(p.dead.numel()),
        "num_classes": len(class_names),
        "class_names": class_names,
        "eps": eps,
        "metrics": metrics,
        "notes": model_notes(measured, len(class_names)),
        "images": images,
        "dims": {
            "ea": [_num(v) for v in p.expected_activation.tolist()],
            "freq": [_num(v) for v in p.frequency.tolist()],
            "consistency": [_num(v) for v in p.consistency.tolist()],
            "majority": [None if c < 0 else int(c) for c in p.majority.tolist()],
            "hist": p.class_counts.tolist(),
            "sepin": None
            if measured.sepin is None
            else [_num(v) for v in measured.sepin["per_dimension"].tolist()],
            "gate": None if measured.gate is None else [_num(v) for v in measured.gate.tolist()],
            "top": tops,
            "top_labels": top_labels,
            "top_values": [
                [round(v, 5) for v in row[: len(t)]] for row, t in zip(values, tops, strict=True)
            ],
            "dead": p.dead.tolist(),
        },
    }
