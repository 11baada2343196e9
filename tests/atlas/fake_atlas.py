"""A synthetic atlas folder for the page's tests: random but self-consistent columns and real
PNG strips of 8 × 8 cells, no model or data needed.

The three default models cover the page's cases: ``m0`` "CL" (signed EA, no dead dimension,
SEPIN measured), ``m1`` "NCL" (a quarter dead, no SEPIN, no accuracy, a note, the labels of
its strips' images in ``top_labels``), ``m2`` "BayesNCL" (40% dead, SEPIN and a gate).
"""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from ncl_lightning.atlas.page import render_page
from ncl_lightning.atlas.schema import FORMAT, image_path

CLASS_NAMES = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
CELL = 8


@dataclass(frozen=True)
class FakeModel:
    """One model of the fake atlas."""

    key: str
    name: str
    dead_share: float = 0.0
    signed: bool = False
    sepin: bool = True
    gate: bool = False
    labels: bool = False
    accuracy: bool = True
    notes: tuple[str, ...] = ()


MODELS = (
    FakeModel("m0", "CL", signed=True),
    FakeModel("m1", "NCL", 0.25, sepin=False, labels=True, accuracy=False,
              notes=("a quarter of the dimensions are dead (fake)",)),
    FakeModel("m2", "BayesNCL", 0.4, gate=True),
)  # fmt: skip


def _model(spec: FakeModel, rng: np.random.Generator, num_features: int, class_names: list[str],
           per_dim: int, num_samples: int) -> dict[str, Any]:  # fmt: skip
    classes = len(class_names)
    dead = rng.random(num_features) < spec.dead_share
    majority = rng.integers(0, classes, num_features)
    hist = rng.integers(0, 8, (num_features, classes))
    hist[np.arange(num_features), majority] += rng.integers(8, 90, num_features)
    hist[dead] = 0
    few = rng.random(num_features) < 0.1  # some dimensions activate on only a few samples
    hist[few & ~dead] = 0
    hist[few & ~dead, majority[few & ~dead]] = rng.integers(1, 6, int((few & ~dead).sum()))
    total = hist.sum(axis=1)
    live = ~dead
    consistency = np.where(live, 100 * hist.max(axis=1) / np.maximum(total, 1), 0.0)
    freq = total / num_samples
    ea = (
        rng.normal(0, 0.05, num_features)
        if spec.signed
        else freq * rng.uniform(0.05, 0.3, num_features)
    )
    ea = np.where(live, ea, 0.0)
    sizes = np.minimum(total, per_dim)
    top = [sorted(rng.choice(num_samples, int(k), replace=False).tolist()) for k in sizes]
    values = [sorted(rng.uniform(0.05, 0.9, int(k)).round(4).tolist(), reverse=True) for k in sizes]
    dims: dict[str, Any] = {
        "ea": ea.round(6).tolist(),
        "freq": freq.round(6).tolist(),
        "consistency": np.where(live, consistency.round(4), None).tolist(),
        "majority": np.where(live, hist.argmax(axis=1), None).tolist(),
        "hist": hist.tolist(),
        "sepin": rng.uniform(0, 3, num_features).round(4).tolist() if spec.sepin else None,
        "gate": np.where(live, rng.uniform(0, 1, num_features), 0).round(4).tolist()
        if spec.gate
        else None,
        "top": top,
        "top_values": values,
        "dead": dead.tolist(),
    }  # fmt: skip
    if spec.labels:
        dims["top_labels"] = [[int(hist[j].argmax())] * int(k) for j, k in enumerate(sizes)]
    entropy = [float(-(p[p > 0] * np.log(p[p > 0])).sum()) for p in hist[live] / total[live, None]]
    metrics: dict[str, Any] = {
        "sparsity": float(1 - freq.mean()),
        "active_dims": int(live.sum()),
        "dead_dims": int(dead.sum()),
    }
    if live.any():
        metrics["semantic_consistency"] = float(consistency[live].mean())
        metrics["semantic_entropy"] = float(np.mean(entropy))
    if spec.sepin:
        metrics.update({"sepin@1": 2.5, "sepin@10": 1.9, "sepin@100": 1.1, "sepin@all": 0.6})
    if spec.accuracy:
        metrics["accuracy"] = 0.9
    if spec.gate:
        metrics["gate_open_rate"] = float(np.mean(dims["gate"]))
    return {
        "key": spec.key, "name": spec.name, "method": spec.name,
        "checkpoint": f"/tmp/fake/{spec.key}.ckpt", "data": "FakeDigits", "split": "test",
        "space": "z", "num_samples": num_samples, "num_features": num_features,
        "num_classes": classes, "class_names": list(class_names), "eps": 1e-3,
        "metrics": metrics, "notes": list(spec.notes),
        "images": {"width": CELL, "height": CELL, "per_dim": per_dim, "card": 8, "ext": "png"},
        "dims": dims,
    }  # fmt: skip


def fake_atlas(
    num_features: int = 64,
    models: tuple[FakeModel, ...] = MODELS,
    class_names: list[str] | None = None,
    per_dim: int = 16,
    num_samples: int = 1000,
    title: str = "Fake atlas",
    seed: int = 0,
) -> dict[str, Any]:
    """The document of a fake atlas (``ncl-atlas/1``)."""
    rng = np.random.default_rng(seed)
    names = list(class_names or CLASS_NAMES)
    return {
        "format": FORMAT,
        "title": title,
        "models": [_model(m, rng, num_features, names, per_dim, num_samples) for m in models],
    }


def _cell(label: int, value: float, rng: np.random.Generator) -> np.ndarray:
    """An 8 × 8 grey cell: the class's fixed pattern, brighter for a larger value, noisy."""
    pattern = np.random.default_rng(1000 + label).random((CELL, CELL)) > 0.55
    noise = rng.random((CELL, CELL)) * 40
    return np.clip(pattern * (120 + 130 * value) + noise, 0, 255).astype(np.uint8)


def write_fake_atlas(
    folder: Path, atlas: dict[str, Any] | None = None, seed: int = 0, inline: bool = False
) -> Path:
    """Write a fake atlas (``atlas`` or :func:`fake_atlas`'s default) into ``folder``: its
    ``index.html`` and one PNG strip per live dimension (in ``img/``, or as data URLs in
    ``images.inline`` with ``inline``); returns the ``index.html`` path."""
    atlas = fake_atlas() if atlas is None else atlas
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for model in atlas["models"]:
        dims = model["dims"]
        if inline:
            model["images"]["inline"] = {}
        for j, (top, values) in enumerate(zip(dims["top"], dims["top_values"], strict=True)):
            if not top:
                continue
            labels = (
                dims["top_labels"][j] if "top_labels" in dims else [dims["majority"][j]] * len(top)
            )
            cells = [_cell(c, v, rng) for c, v in zip(labels, values, strict=True)]
            strip = Image.fromarray(np.concatenate(cells, axis=1), mode="L")
            if inline:
                png = io.BytesIO()
                strip.save(png, format="png")
                url = "data:image/png;base64," + base64.b64encode(png.getvalue()).decode()
                model["images"]["inline"][str(j)] = url
                continue
            path = folder / image_path(model["key"], j, model["images"]["ext"])
            path.parent.mkdir(parents=True, exist_ok=True)
            strip.save(path)
    index = folder / "index.html"
    index.write_text(render_page(atlas), encoding="utf-8")
    return index
