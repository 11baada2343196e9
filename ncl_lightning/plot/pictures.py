"""Pure drawing functions for feature pictures (no Lightning, no state).

Sizes are deterministic: the activation grid is composed pixel by pixel with PIL, and the
matplotlib figures use a fixed size and dpi (no tight bounding box), so a picture's size
depends only on its arguments.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt
import numpy as np
import torch
from PIL import Image, ImageDraw
from torch import Tensor

FIGSIZE = (6.4, 4.8)
DPI = 100
LABEL_WIDTH = 72
PAD = 2


def to_uint8(images: Tensor, mean: Sequence[float], std: Sequence[float]) -> np.ndarray:
    """Un-normalise ``[N, C, H, W]`` images into ``[N, H, W, 3]`` uint8 (grey -> RGB)."""
    m = torch.tensor(mean, dtype=images.dtype).view(1, -1, 1, 1)
    s = torch.tensor(std, dtype=images.dtype).view(1, -1, 1, 1)
    pixels = (images.cpu() * s + m).clamp(0, 1)
    if pixels.shape[1] == 1:
        pixels = pixels.expand(-1, 3, -1, -1)
    return (pixels.permute(0, 2, 3, 1).numpy() * 255).round().astype(np.uint8)


def grid_size(rows: int, cols: int, cell: int) -> tuple[int, int]:
    """``(width, height)`` in pixels of [`activation_grid`][]."""
    return LABEL_WIDTH + cols * (cell + PAD) + PAD, rows * (cell + PAD) + PAD


def activation_grid(images: np.ndarray, row_labels: Sequence[str], cell: int = 64) -> Image.Image:
    """One row per feature dimension, its top-activated images left to right.

    Args:
        images: ``[rows, cols, H, W, 3]`` uint8.
        row_labels: One label per row (e.g. ``"dim 17\\nEA .031"``).
        cell: Side in pixels of each (nearest-upscaled) image.
    """
    rows, cols = images.shape[:2]
    canvas = Image.new("RGB", grid_size(rows, cols, cell), "white")
    draw = ImageDraw.Draw(canvas)
    for r in range(rows):
        y = PAD + r * (cell + PAD)
        draw.multiline_text((4, y + 4), row_labels[r], fill="black")
        for c in range(cols):
            tile = Image.fromarray(images[r, c]).resize((cell, cell), Image.NEAREST)
            canvas.paste(tile, (LABEL_WIDTH + PAD + c * (cell + PAD), y))
    return canvas


def _save(fig: plt.Figure, path: Path) -> Path:
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def heatmap(values: Tensor, path: Path, title: str, xlabel: str, ylabel: str) -> Path:
    """Save a heat map of a ``[rows, cols]`` matrix (e.g. samples x dimensions)."""
    fig, ax = plt.subplots(figsize=FIGSIZE)
    im = ax.imshow(
        values.cpu().float().numpy(), aspect="auto", cmap="viridis", interpolation="nearest"
    )
    fig.colorbar(im, ax=ax)
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    return _save(fig, path)


def correlation(features: Tensor, path: Path, title: str) -> Path:
    """Save the dimension-by-dimension correlation matrix of ``[N, d]`` features.

    Dimensions that are constant over the samples (e.g. dead ones) have no defined
    correlation and are drawn as 0.
    """
    corr = torch.corrcoef(features.float().T).nan_to_num(0.0)
    fig, ax = plt.subplots(figsize=FIGSIZE)
    im = ax.imshow(corr.cpu().numpy(), cmap="RdBu_r", vmin=-1, vmax=1, interpolation="nearest")
    fig.colorbar(im, ax=ax)
    ax.set(title=title, xlabel="dimension", ylabel="dimension")
    return _save(fig, path)


def ea_curve(ea: Tensor, path: Path, title: str) -> Path:
    """Save the expected activation of every dimension, sorted in decreasing order."""
    fig, ax = plt.subplots(figsize=FIGSIZE)
    ax.plot(ea.sort(descending=True).values.cpu().numpy())
    ax.set(title=title, xlabel="dimension rank (by EA)", ylabel="expected activation")
    ax.grid(alpha=0.3)
    return _save(fig, path)


def side_by_side(
    paths: Sequence[Path], titles: Sequence[str], out: Path, vertical: bool = False
) -> Path:
    """Place pictures next to each other (or one below the other, ``vertical``) with a
    title band above each; save as PNG. Stacked grids stay legible at a page's width."""
    pictures = [Image.open(p).convert("RGB") for p in paths]
    band = 20
    if vertical:
        width = max(p.width for p in pictures) + 2 * PAD
        height = sum(p.height + band for p in pictures) + PAD * (len(pictures) + 1)
    else:
        width = sum(p.width for p in pictures) + PAD * (len(pictures) + 1)
        height = max(p.height for p in pictures) + band + PAD
    canvas = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(canvas)
    x = y = PAD
    for picture, title in zip(pictures, titles, strict=True):
        if vertical:
            draw.text((x + 4, y + 4), title, fill="black")
            canvas.paste(picture, (x, y + band))
            y += picture.height + band + PAD
        else:
            draw.text((x + 4, 4), title, fill="black")
            canvas.paste(picture, (x, band))
            x += picture.width + PAD
    canvas.save(out)
    return out


def accuracy_vs_k(
    curves: dict[str, tuple[Sequence[int], Sequence[float]]], path: Path, title: str
) -> Path:
    """Save accuracy against the number of kept dimensions, one line per selection
    rule (NCL paper, Figure 10); ``curves[name] = (ks, accuracies in [0, 1])``."""
    fig, ax = plt.subplots(figsize=FIGSIZE)
    for name, (ks, accs) in curves.items():
        ax.plot(list(ks), [100 * a for a in accs], marker="o", label=name)
    ax.set_xscale("log", base=2)
    ax.set(title=title, xlabel="selected dimensions k", ylabel="linear accuracy (%)")
    ax.grid(alpha=0.3)
    ax.legend()
    return _save(fig, path)
