"""Pure drawing functions for feature pictures (no Lightning, no state).

Every figure uses the package's style ([`figure_style`][ncl_lightning.plot.style.figure_style]:
no global matplotlib state changes) and a fixed size and dpi (no tight bounding box), so a
picture's pixel size depends only on its arguments. Each function takes ``formats`` (some of
``png``, ``pdf``, ``svg``) and writes the vector files beside the PNG when asked.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from matplotlib.figure import Figure
from PIL import Image
from torch import Tensor

from ncl_lightning.foundation.validation import check_int, check_shape
from ncl_lightning.plot.style import (
    DIVERGING_CMAP,
    DPI,
    LABEL_SIZE,
    SEQUENTIAL_CMAP,
    SMALL_SIZE,
    TITLE_SIZE,
    check_formats,
    figure_style,
    new_figure,
    save_figure,
)

FIGSIZE = (6.4, 4.8)  # inches of the heat maps and curves
LABEL_WIDTH = 120  # pixels of the row-label column of the activation grid
TITLE_LINE = 18  # pixels per title line of the activation grid
CAPTION = 12  # pixels of the class caption under each grid image
CAPTION_CELL = 32  # smallest cell with captions (narrower images leave them out)
ROW_LABEL = 44  # smallest row height: the three lines of a row label
MIN_WIDTH = 360  # pixels: room for the title of a narrow grid
PAD = 2
TITLE_BAND = 22  # pixels above each picture of side_by_side: one title line


def to_uint8(images: Tensor, mean: Sequence[float], std: Sequence[float]) -> np.ndarray:
    """Un-normalise ``[N, C, H, W]`` images into ``[N, H, W, 3]`` uint8 (grey -> RGB)."""
    m = torch.tensor(mean, dtype=images.dtype).view(1, -1, 1, 1)
    s = torch.tensor(std, dtype=images.dtype).view(1, -1, 1, 1)
    pixels = (images.cpu() * s + m).clamp(0, 1)
    if pixels.shape[1] == 1:
        pixels = pixels.expand(-1, 3, -1, -1)
    return (pixels.permute(0, 2, 3, 1).numpy() * 255).round().astype(np.uint8)


def row_label(dim: int, ea: float, majority: tuple[int, float] | None, names: Sequence[str]) -> str:
    """``"dim 17\nEA 0.031\ncat 70%"``: a grid row's label; the class line (the row's
    ``majority`` class and its share, named by ``names`` or by its id) only with one."""
    text = f"dim {dim}\nEA {ea:.3f}"
    if majority is not None:
        label, share = majority
        name = names[label] if 0 <= label < len(names) else str(label)
        text += f"\n{name} {share:.0%}"
    return text


def _row_height(cell: int, captions: bool) -> int:
    """Pixels of one grid row: the images (at least a row label's height), the captions
    (only from ``CAPTION_CELL`` pixels on) and a gap."""
    captions = captions and cell >= CAPTION_CELL
    return max(cell + (CAPTION if captions else 0), ROW_LABEL) + PAD


def grid_size(
    rows: int, cols: int, cell: int, title_lines: int = 2, captions: bool = True
) -> tuple[int, int]:
    """``(width, height)`` in pixels of [`activation_grid`][] (and of its PNG)."""
    width = max(LABEL_WIDTH + cols * (cell + PAD) + PAD, MIN_WIDTH)
    return width, title_lines * TITLE_LINE + 8 + rows * _row_height(cell, captions)


def _mosaic(images: np.ndarray, cell: int, captions: bool) -> np.ndarray:
    """``[rows, cols, H, W, 3]`` images as one white-padded ``uint8`` picture, each image
    nearest-upscaled to ``cell`` pixels (blocks of equal pixels: no blur)."""
    rows, cols = images.shape[:2]
    row = _row_height(cell, captions)
    canvas = np.full((rows * row, cols * (cell + PAD) + PAD, 3), 255, np.uint8)
    for r in range(rows):
        for c in range(cols):
            tile = Image.fromarray(images[r, c]).resize((cell, cell), Image.NEAREST)
            x = PAD + c * (cell + PAD)
            canvas[r * row : r * row + cell, x : x + cell] = np.asarray(tile.convert("RGB"))
    return canvas


def activation_grid(
    images: np.ndarray,
    row_labels: Sequence[str],
    title: str,
    image_labels: Sequence[Sequence[str]] | None = None,
    cell: int = 64,
) -> Figure:
    """One row per feature dimension, its top-activated images left to right (NCL paper,
    Figure 1), as a figure (not saved; [`save_figure`][ncl_lightning.plot.style.save_figure]
    writes it). Images are drawn pixel for pixel in the PNG (size [`grid_size`][]).

    Args:
        images: ``[rows, cols, H, W, 3]`` uint8.
        row_labels: One label per row (e.g. [`row_label`][]'s ``"dim 17\nEA 0.031\ncat 70%"``).
        title: Above the grid (e.g. the model and the epoch); one or more lines.
        image_labels: ``[rows][cols]`` caption under each image (its class), or None;
            left out for cells under ``CAPTION_CELL`` pixels (they would overlap).
        cell: Side in pixels of each (nearest-upscaled) image.

    Raises:
        ConfigError: ``images`` not ``[rows, cols, H, W, 3]``, labels of another count,
            ``cell`` < 1.
    """
    check_shape("images", images, ("rows", "cols", "H", "W", 3))
    check_int("cell", cell)
    rows, cols = images.shape[:2]
    check_shape("row_labels", np.empty(len(row_labels)), (rows,))
    if image_labels is not None:
        check_shape("image_labels", np.empty(len(image_labels)), (rows,))
        for labels in image_labels:
            check_shape("image_labels", np.empty((rows, len(labels))), (rows, cols))
    captions = image_labels is not None and cell >= CAPTION_CELL
    lines = title.count("\n") + 1
    width, height = grid_size(rows, cols, cell, lines, captions)
    top = lines * TITLE_LINE + 8  # pixels above the images
    row = _row_height(cell, captions)
    mosaic = _mosaic(images, cell, captions)
    with figure_style():
        fig = new_figure((width / DPI, height / DPI))
        fig.text(0.5, 1 - 4 / height, title, ha="center", va="top", size=TITLE_SIZE,
                 linespacing=1.3)  # fmt: skip
        box = (LABEL_WIDTH / width, 0, mosaic.shape[1] / width, 1 - top / height)
        ax = fig.add_axes(box)  # the mosaic pixel for pixel
        ax.imshow(mosaic, interpolation="nearest", aspect="auto")
        ax.set_axis_off()
        for r in range(rows):
            y = 1 - (top + r * row + (row - PAD) / 2) / height
            fig.text(4 / width, y, row_labels[r], va="center", size=LABEL_SIZE - 1)
            for c in range(cols if captions else 0):
                x = (LABEL_WIDTH + PAD + c * (cell + PAD) + cell / 2) / width
                y = 1 - (top + r * row + cell + 1) / height
                caption = image_labels[r][c]  # type: ignore[index]
                fig.text(x, y, caption, ha="center", va="top", size=SMALL_SIZE)
    return fig


def _plain(title: str, xlabel: str, ylabel: str) -> tuple[Figure, object]:
    fig = new_figure(FIGSIZE)
    ax = fig.add_subplot()
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    return fig, ax


def heatmap(
    values: Tensor, path: Path, title: str, xlabel: str, ylabel: str,
    formats: Sequence[str] = ("png",),
) -> Path:  # fmt: skip
    """Save a heat map of a ``[rows, cols]`` matrix (e.g. samples x dimensions) as
    ``path`` (and its ``formats``); returns the first file written."""
    with figure_style():
        fig, ax = _plain(title, xlabel, ylabel)
        im = ax.imshow(values.cpu().float().numpy(), aspect="auto", cmap=SEQUENTIAL_CMAP)
        fig.colorbar(im, ax=ax)
    return save_figure(fig, path, formats)[0]


def correlation(
    features: Tensor, path: Path, title: str, formats: Sequence[str] = ("png",)
) -> Path:
    """Save the dimension-by-dimension correlation matrix of ``[N, d]`` features.

    Dimensions that are constant over the samples (e.g. dead ones) have no defined
    correlation and are drawn as 0. Returns the first file written.
    """
    corr = torch.corrcoef(features.float().T).nan_to_num(0.0)
    with figure_style():
        fig, ax = _plain(title, "dimension", "dimension")
        im = ax.imshow(corr.cpu().numpy(), cmap=DIVERGING_CMAP, vmin=-1, vmax=1)
        fig.colorbar(im, ax=ax)
    return save_figure(fig, path, formats)[0]


def ea_curve(ea: Tensor, path: Path, title: str, formats: Sequence[str] = ("png",)) -> Path:
    """Save the expected activation of every dimension, sorted in decreasing order;
    returns the first file written."""
    with figure_style():
        fig, ax = _plain(title, "dimension rank (by EA)", "expected activation")
        ax.plot(ea.sort(descending=True).values.cpu().numpy())
        ax.grid(True)
    return save_figure(fig, path, formats)[0]


def side_by_side_size(sizes: Sequence[tuple[int, int]], vertical: bool = False) -> tuple[int, int]:
    """``(width, height)`` in pixels of [`side_by_side`][] (and of its PNG) for pictures of
    ``sizes`` (``(width, height)`` each)."""
    if vertical:
        width = max(w for w, _ in sizes) + 2 * PAD
        height = sum(h + TITLE_BAND for _, h in sizes) + PAD * (len(sizes) + 1)
    else:
        width = sum(w for w, _ in sizes) + PAD * (len(sizes) + 1)
        height = max(h for _, h in sizes) + TITLE_BAND + PAD
    return width, height


def side_by_side(
    paths: Sequence[Path],
    titles: Sequence[str],
    out: Path,
    vertical: bool = False,
    formats: Sequence[str] = ("png",),
) -> Path:
    """Place pictures next to each other (or one below the other, ``vertical``), each
    under its title, in the package's figure style; stacked grids stay legible at a page's
    width. Each picture is drawn pixel for pixel in the PNG (size [`side_by_side_size`][]).

    Args:
        paths: The pictures (any format PIL reads).
        titles: One title per picture (e.g. the method's name).
        out: The file; its suffix is replaced by each format's.
        vertical: Stack the pictures instead of placing them in a row.
        formats: Some of ``png``, ``pdf``, ``svg`` (vector files beside the PNG).

    Returns:
        The first file written.

    Raises:
        ConfigError: No pictures, a title count other than the picture count, or an
            unknown format.
    """
    check_formats(formats)
    check_shape("titles", np.empty(len(titles)), (len(paths),))
    check_int("len(paths)", len(paths))  # at least one picture
    pictures = [np.asarray(Image.open(p).convert("RGB")) for p in paths]
    sizes = [(p.shape[1], p.shape[0]) for p in pictures]
    width, height = side_by_side_size(sizes, vertical)
    x = y = PAD
    with figure_style():
        fig = new_figure((width / DPI, height / DPI))
        for picture, (w, h), title in zip(pictures, sizes, titles, strict=True):
            top = y + TITLE_BAND if vertical else TITLE_BAND
            fig.text((x + w / 2) / width, 1 - (top - 3) / height, title, ha="center",
                     va="bottom", size=TITLE_SIZE)  # fmt: skip
            ax = fig.add_axes((x / width, 1 - (top + h) / height, w / width, h / height))
            ax.imshow(picture, interpolation="nearest", aspect="auto")
            ax.set_axis_off()
            if vertical:
                y += h + TITLE_BAND + PAD
            else:
                x += w + PAD
    return save_figure(fig, out, formats)[0]


def accuracy_vs_k(
    curves: dict[str, tuple[Sequence[int], Sequence[float]]],
    path: Path,
    title: str,
    formats: Sequence[str] = ("png",),
) -> Path:
    """Save accuracy against the number of kept dimensions, one line per selection
    rule (NCL paper, Figure 10); ``curves[name] = (ks, accuracies in [0, 1])``. Returns
    the first file written."""
    with figure_style():
        fig, ax = _plain(title, "selected dimensions k", "linear accuracy (%)")
        for name, (ks, accs) in curves.items():
            ax.plot(list(ks), [100 * a for a in accs], marker="o", label=name)
        ax.set_xscale("log", base=2)
        ax.grid(True)
        ax.legend()
    return save_figure(fig, path, formats)[0]
