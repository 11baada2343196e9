"""Procedural dSprites: 64x64 binary sprites over five ground-truth factors, no download.

Reference: Matthey et al., "dSprites: Disentanglement testing Sprites dataset" (2017); the
NCL paper (Wang et al., ICLR 2024, Table 6) evaluates disentanglement on dSprites. The
factors, in the original's row-major order, are shape (square, ellipse, heart), scale
``linspace(0.5, 1, 6)``, orientation (40 angles in ``[0, 2π)``), posX and posY
(``linspace(0, 1, 32)`` each); the original's constant "color" factor is omitted. Images
are rendered on demand by an implicit inside-test on the pixel grid, so the 737,280
combinations are never held in memory. The renderer approximates, but does not copy
pixel for pixel, the original sprites.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor
from torch.utils.data import Dataset

DSPRITES_FACTOR_NAMES = ("shape", "scale", "orientation", "pos_x", "pos_y")
DSPRITES_FACTOR_SIZES = (3, 6, 40, 32, 32)
DSPRITES_SHAPES = ("square", "ellipse", "heart")
DSPRITES_NUM_IMAGES = math.prod(DSPRITES_FACTOR_SIZES)  # 737,280
IMAGE_SIZE = 64

# Row-major strides of the mixed-radix index: (245760, 40960, 1024, 32, 1).
_STRIDES = tuple(math.prod(DSPRITES_FACTOR_SIZES[i + 1 :]) for i in range(5))
# Centres span pixels 8..56 (as in the original); every sprite fits in a radius of 7.
_MARGIN = 8.0
_RADIUS = 7.0


def _check_factors(factors: Tensor) -> Tensor:
    if factors.shape[-1:] != (5,):
        raise ValueError(f"factors must have shape [..., 5], got {tuple(factors.shape)}")
    factors = factors.long()
    sizes = torch.tensor(DSPRITES_FACTOR_SIZES, device=factors.device)
    if factors.numel() and ((factors < 0).any() or (factors >= sizes).any()):
        raise ValueError(f"factors must lie in [0, {DSPRITES_FACTOR_SIZES}) per column")
    return factors


def index_to_factors(index: Tensor | int) -> Tensor:
    """Split flat indices into factor values (mixed radix, row-major like the original npz).

    Args:
        index: Int or integer tensor ``[...]`` in ``[0, 737280)``.

    Returns:
        int64 ``[..., 5]`` factor values (shape, scale, orientation, posX, posY).
    """
    index = torch.as_tensor(index).long()
    if index.numel() and (index.min() < 0 or index.max() >= DSPRITES_NUM_IMAGES):
        raise ValueError(f"index must lie in [0, {DSPRITES_NUM_IMAGES})")
    strides = torch.tensor(_STRIDES, device=index.device)
    sizes = torch.tensor(DSPRITES_FACTOR_SIZES, device=index.device)
    return (index[..., None] // strides) % sizes


def factors_to_index(factors: Tensor | Sequence[int]) -> Tensor:
    """Inverse of :func:`index_to_factors`.

    Args:
        factors: Integer ``[..., 5]`` factor values, each in ``[0, size)``.

    Returns:
        int64 ``[...]`` flat indices in ``[0, 737280)``.
    """
    factors = _check_factors(torch.as_tensor(factors))
    return (factors * torch.tensor(_STRIDES, device=factors.device)).sum(dim=-1)


def factor_values(factors: Tensor | Sequence[int]) -> tuple[int, float, float, float, float]:
    """Map one factor vector to ``(shape, scale, angle in radians, posX, posY)``."""
    shape, scale, orient, pos_x, pos_y = _check_factors(torch.as_tensor(factors)).tolist()
    return (shape, 0.5 + 0.1 * scale, 2 * math.pi * orient / 40, pos_x / 31, pos_y / 31)


def render_sprite(factors: Tensor | Sequence[int]) -> Tensor:
    """Render one sprite as a binary ``[1, 64, 64]`` float32 image.

    The sprite is centred at column ``8 + 48 posX`` and row ``8 + 48 posY`` (pixel centres
    at ``i + 0.5``; posY grows downwards), scaled by ``scale`` and rotated anticlockwise by
    the orientation. Each pixel centre is rotated into the sprite frame and tested against
    the shape, with ``u = 7 scale`` pixels: square ``|x|, |y| <= u / √2``; ellipse
    ``(x / u)² + (y / (u / 2))² <= 1`` (elongated 2:1 like the original); heart
    ``(x² + y² - 1)³ - x² y³ <= 0`` in units of ``u / 1.45`` (point down at angle 0).

    Args:
        factors: Five integer factor values (shape, scale, orientation, posX, posY).

    Returns:
        float32 ``[1, 64, 64]`` with values in ``{0, 1}``.
    """
    shape, scale, angle, pos_x, pos_y = factor_values(factors)
    span = IMAGE_SIZE - 2 * _MARGIN
    coords = torch.arange(IMAGE_SIZE, dtype=torch.float64) + 0.5
    rows, cols = torch.meshgrid(coords, coords, indexing="ij")
    dx = cols - (_MARGIN + span * pos_x)
    dy = (_MARGIN + span * pos_y) - rows  # y up in the sprite frame
    cos, sin = math.cos(angle), math.sin(angle)
    x, y = cos * dx + sin * dy, -sin * dx + cos * dy  # rotate by -angle
    u = _RADIUS * scale
    if shape == 0:
        inside = torch.maximum(x.abs(), y.abs()) <= u / math.sqrt(2)
    elif shape == 1:
        inside = (x / u) ** 2 + (y / (u / 2)) ** 2 <= 1
    else:
        x, y = x * 1.45 / u, y * 1.45 / u
        inside = (x**2 + y**2 - 1) ** 3 - x**2 * y**3 <= 0
    return inside.float()[None]


class DSpritesDataset(Dataset):
    """``(image [1, 64, 64], factors [5])`` items of the procedural dSprites grid.

    Args:
        indices: Flat grid indices in ``[0, 737280)`` to expose, in order; ``None`` for
            all 737,280 combinations.
    """

    def __init__(self, indices: Sequence[int] | Tensor | None = None) -> None:
        if indices is None:
            self.indices = torch.arange(DSPRITES_NUM_IMAGES)
        else:
            self.indices = torch.as_tensor(indices).long().reshape(-1)
            if self.indices.numel() and (
                self.indices.min() < 0 or self.indices.max() >= DSPRITES_NUM_IMAGES
            ):
                raise ValueError(f"indices must lie in [0, {DSPRITES_NUM_IMAGES})")

    @classmethod
    def sample(cls, n: int, seed: int = 0) -> DSpritesDataset:
        """Dataset over ``n`` distinct uniform random indices (generator seeded by ``seed``)."""
        if not 0 <= n <= DSPRITES_NUM_IMAGES:
            raise ValueError(f"n must be in [0, {DSPRITES_NUM_IMAGES}], got {n}")
        generator = torch.Generator().manual_seed(seed)
        return cls(torch.randperm(DSPRITES_NUM_IMAGES, generator=generator)[:n])

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i: int) -> tuple[Tensor, Tensor]:
        factors = index_to_factors(self.indices[i])
        return render_sprite(factors), factors
