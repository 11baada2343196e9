"""A 2-D map of features coloured by class: UMAP (``umap-learn``) or t-SNE (scikit-learn).

The picture solo-learn and lightly users look for first: every evaluation image a point,
placed by a 2-D embedding of its features (``h`` or ``z``), coloured by its class; several
models side by side (CL against NCL). [`embed_2d`][] makes the coordinates,
[`feature_map`][] the picture; the [`TopActivations`][ncl_lightning.callbacks.TopActivations]
callback draws one with ``feature_map: true`` and hands it to image loggers (W&B), and
``python -m ncl_lightning.atlas.feature_map`` draws checkpoints side by side.

References: McInnes et al., "UMAP: Uniform Manifold Approximation and Projection", 2018;
van der Maaten and Hinton, "Visualizing Data using t-SNE", JMLR 2008.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from torch import Tensor

from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.foundation.validation import check_choice
from ncl_lightning.plot.style import figure_style, new_figure, save_figure

EMBEDDINGS = ("auto", "umap", "tsne")
"""``auto``: UMAP where ``umap-learn`` is installed, else t-SNE."""


def embedding_used(method: str) -> str:
    """The method ``method`` runs: ``auto`` becomes ``umap`` or ``tsne``.

    Raises:
        ConfigError: An unknown name, or ``umap`` without ``umap-learn`` installed.
    """
    check_choice("feature_map_method", method, EMBEDDINGS)
    have_umap = importlib.util.find_spec("umap") is not None
    if method == "auto":
        return "umap" if have_umap else "tsne"
    if method == "umap" and not have_umap:
        raise ConfigError(
            "feature_map_method: umap needs umap-learn (pip install umap-learn); "
            "tsne (scikit-learn) needs nothing more",
            key="feature_map_method",
        )
    return method


def embed_2d(features: Tensor, method: str = "auto", seed: int = 0) -> tuple[np.ndarray, str]:
    """2-D coordinates ``[N, 2]`` of the rows of ``features`` ``[N, d]`` (``N >= 3``), and the
    method that made them (``umap`` or ``tsne``; [`embedding_used`][]). t-SNE starts from
    the PCA of the rows, with perplexity ``min(30, (N - 1) / 3)``; both are seeded."""
    used = embedding_used(method)
    x = features.detach().float().cpu().numpy()
    if x.ndim != 2 or x.shape[0] < 3:
        raise ConfigError(f"a feature map needs [N >= 3, d] features, got {list(x.shape)}")
    if used == "umap":
        import umap

        neighbours = min(15, x.shape[0] - 1)
        return umap.UMAP(n_neighbors=neighbours, random_state=seed).fit_transform(x), used
    from sklearn.manifold import TSNE

    perplexity = min(30.0, (x.shape[0] - 1) / 3)
    tsne = TSNE(n_components=2, init="pca", perplexity=perplexity, random_state=seed)
    return tsne.fit_transform(x), used


def feature_map(
    panels: Sequence[tuple[str, np.ndarray, np.ndarray | None]],
    path: Path,
    title: str,
    class_names: Sequence[str] = (),
    formats: Sequence[str] = ("png",),
) -> Path:
    """One scatter panel per ``(name, coordinates [N, 2], labels [N] or None)``, side by
    side, points coloured by class (one legend), saved to ``path`` (and ``formats``)."""
    classes = sorted({int(c) for _, _, labels in panels if labels is not None for c in labels})
    cmap = "tab10" if len(classes) <= 10 else "tab20"
    with figure_style():
        fig = new_figure((4.2 * len(panels) + 1.2, 4.4))
        for i, (name, xy, labels) in enumerate(panels):
            ax = fig.add_subplot(1, len(panels), i + 1)
            if labels is None:
                ax.scatter(xy[:, 0], xy[:, 1], s=4, color="0.3", linewidths=0)
            else:
                for c in classes:
                    keep = labels == c
                    label = class_names[c] if c < len(class_names) else str(c)
                    ax.scatter(xy[keep, 0], xy[keep, 1], s=4, linewidths=0, label=label,
                               color=_colour(cmap, classes.index(c)))  # fmt: skip
            ax.set_title(name)
            ax.set_xticks([])
            ax.set_yticks([])
        if 0 < len(classes) <= 20:
            fig.axes[-1].legend(loc="center left", bbox_to_anchor=(1.0, 0.5), markerscale=3,
                                frameon=False)  # fmt: skip
        fig.suptitle(title)
    return save_figure(fig, path, formats)[0]


def _colour(cmap: str, index: int) -> tuple[float, ...]:
    from matplotlib import colormaps

    palette = colormaps[cmap]
    return palette(index % palette.N)
