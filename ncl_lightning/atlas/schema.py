"""The data an atlas page embeds: one JSON document, ``FORMAT`` ``ncl-atlas/1``.

``index.html`` carries it in ``<script type="application/json" id="atlas-data">``; the page's
script draws everything from it, and tests read it back ([`read_atlas`][]). The document::

    {
      "format": "ncl-atlas/1",
      "title": str,
      "models": [MODEL, ...]          # 1 or more; compare mode pairs any two
    }

``MODEL``::

    {
      "key": "m0",                    # [a-z0-9_-]+, unique; images live in img/<key>/
      "name": "NCL",                  # label on the page
      "method": "NCL",                # the LightningModule class
      "checkpoint": str | null,
      "data": "DigitsDataModule",     # the DataModule class
      "split": "test",                # "val" or "test"
      "space": "z",                   # "z" (objective features) or "h" (backbone output)
      "num_samples": int, "num_features": int, "num_classes": int,
      "class_names": [str] * num_classes,
      "eps": float,                   # activation threshold on |ẑ_i| (ẑ = z / ||z||₂)
      "metrics": {                    # the header table; a key that is absent is unknown
        "sparsity": float,            # share of zero entries of ẑ, in [0, 1]
        "active_dims": int, "dead_dims": int,
        "semantic_consistency": float,  # percent, mean over active dimensions
        "semantic_entropy": float,      # H_s in nats, mean over active dimensions
        "sepin@1": float, "sepin@10": float, "sepin@100": float, "sepin@all": float,
        "accuracy": float,            # top-1 of the model's own probe or head, in [0, 1]
        "gate_open_rate": float       # BayesNCL: mean open frequency of the gate, in [0, 1]
      },
      "notes": [str],                 # warnings the page shows in the header
      "images": {"width": int, "height": int,   # pixel size of one stored image
                 "per_dim": int,      # images per strip at most (the detail view)
                 "card": int,         # images a card shows (the strip's first ones)
                 "ext": "png" | "jpeg" | "webp",
                 "inline": {str(dim): "data:..."} | absent},  # single-file pages:
                                      # only the dims listed have images
      "dims": {                       # columns: entry j is dimension j (num_features long)
        "ea": [float],                # expected activation mean_x ẑ_j(x)
        "freq": [float],              # activation frequency: share of samples with |ẑ_j| > eps
        "consistency": [float|null],  # percent of activating samples in the majority class
        "majority": [int|null],       # that class (null for a dead dimension)
        "hist": [[int]],              # [num_features][num_classes] activating-sample counts
        "sepin": [float] | null,      # per-dimension SEPIN; null when not measured
        "gate": [float] | null,       # BayesNCL gate open frequency; null for other methods
        "top": [[int]],               # dataset indices of the strip's images, most active
                                      # first; only samples that activate the dimension
        "top_values": [[float]],      # ẑ_j of those samples
        "top_labels": [[int]] | null, # their classes (null when not recorded)
        "dead": [bool]                # no sample activates the dimension
      }
    }

The images of dimension ``j`` of model ``key`` are one file, ``img/<key>/<j>.<ext>``: a
horizontal strip of ``len(top[j])`` cells of ``width`` × ``height`` pixels (no file when the
strip is empty). With ``images.inline`` the page takes the strip from that data URL instead.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from ncl_lightning.foundation.errors import DataError

FORMAT = "ncl-atlas/1"
DATA_ELEMENT_ID = "atlas-data"
IMAGE_DIR = "img"
_DATA_RE = re.compile(
    rf'<script type="application/json" id="{DATA_ELEMENT_ID}">(.*?)</script>', re.DOTALL
)


def image_path(key: str, dim: int, ext: str) -> str:
    """Path of a dimension's image strip, relative to the atlas folder."""
    return f"{IMAGE_DIR}/{key}/{dim}.{ext}"


def embed_json(atlas: dict[str, Any]) -> str:
    """The document as text safe inside ``<script>``: no ``</script>`` or ``<!--`` in it."""
    # ``<`` only occurs inside JSON strings, where ``\\u003c`` is the same character.
    return json.dumps(atlas, separators=(",", ":"), allow_nan=False).replace("<", "\\u003c")


def read_atlas(index_html: str | Path) -> dict[str, Any]:
    """The document embedded in an atlas page (a path to ``index.html`` or its text)."""
    text = Path(index_html).read_text() if isinstance(index_html, Path) else index_html
    found = _DATA_RE.search(text)
    if found is None:
        raise DataError(f'no <script id="{DATA_ELEMENT_ID}"> in the page: not an atlas')
    return json.loads(found.group(1))
