"""Feature atlas: every dimension of a model in a static web page, and two models compared.

``FeatureAtlas`` (a callback for ``ncl-cli test``), [`build_atlas`][] and
``python -m ncl_lightning.atlas`` (one or more checkpoints), [`read_atlas`][] (the data a
page embeds).
"""

from ncl_lightning.atlas.build import build_atlas
from ncl_lightning.atlas.callback import FeatureAtlas
from ncl_lightning.atlas.schema import read_atlas

__all__ = ["FeatureAtlas", "build_atlas", "read_atlas"]
