"""Procedural dSprites: 64x64 binary sprites over five ground-truth factors, no download.

Reference: Matthey et al., "dSprites: Disentanglement testing Sprites dataset" (2017); the
NCL paper (Wang et al., ICLR 2024, Table 6) evaluates disentanglement on dSprites. The
factors, in the original's row-major order, are shape (square, ellipse, heart), scale
``linspace(0.5, 1, 6)``, orientation (40 angles in ``[0, 2π)``), posX and posY
(``linspace(0, 1, 32)`` each); the original's constant "color" factor is omitted. Images
are rendered on demand by an implicit inside-test on the pixel grid, so the 737,280
combinations are never held in memory. The renderer approximates, but does not copy
pixel for pixel, the original sprites; :func:`render_sprites` renders a batch at once.

``DSpritesDataModule`` serves disjoint random train / val / test subsets of the grid for
contrastive pre-training and disentanglement evaluation (MIG, Chen et al., 2018):

* ``train_dataloader``: ``(views, factors)``, ``views`` a list of ``n_views`` float
  tensors ``[B, 1, 64, 64]`` (independent :class:`SpriteAugmentation` draws of the same
  sprites), ``factors`` int64 ``[B, 5]``; shuffled, last incomplete batch dropped.
* ``val_dataloader`` / ``test_dataloader``: clean ``(images [B, 1, 64, 64], factors
  [B, 5])`` in order, no batch dropped.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import lightning as L
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, TensorDataset

from ncl_lightning.data.base import check_train_batches
from ncl_lightning.data.sprite_augmentation import SpriteAugmentation
from ncl_lightning.runtime.errors import ConfigError

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


# Every sprite lies within 7 px of its centre, so the batched renderer only evaluates a
# 20x20 window (>= 8 px around the centre, clamped into the image): ~10x fewer pixels.
_WINDOW = 20


def _render_tables(device: torch.device) -> dict[str, Tensor]:
    """Per-factor-value constants, computed in Python floats exactly as :func:`render_sprite`
    computes them, so the batched renderer reproduces it bit for bit."""
    span = IMAGE_SIZE - 2 * _MARGIN
    scales = [0.5 + 0.1 * s for s in range(DSPRITES_FACTOR_SIZES[1])]
    angles = [2 * math.pi * o / 40 for o in range(DSPRITES_FACTOR_SIZES[2])]
    u = [_RADIUS * s for s in scales]
    tables = {
        "cos": [math.cos(a) for a in angles],
        "sin": [math.sin(a) for a in angles],
        "centre": [_MARGIN + span * (p / 31) for p in range(DSPRITES_FACTOR_SIZES[3])],
        "u": u,
        "half_side": [v / math.sqrt(2) for v in u],
        "half_u": [v / 2 for v in u],
    }
    return {k: torch.tensor(v, dtype=torch.float64, device=device) for k, v in tables.items()}


def render_sprites(factors: Tensor) -> Tensor:
    """Render a batch of sprites; bit-identical to :func:`render_sprite` per row.

    Vectorised over the batch: each sprite is tested only on a ``20 x 20`` pixel window
    around its centre (every sprite fits within 7 px of it) and scattered into a blank
    canvas, about 10x faster per image than the one-image renderer.

    Args:
        factors: Integer factor values ``[B, 5]`` (shape, scale, orientation, posX, posY).

    Returns:
        float32 ``[B, 1, 64, 64]`` with values in ``{0, 1}``, on ``factors``' device.
    """
    factors = _check_factors(torch.as_tensor(factors))
    if factors.ndim != 2:
        raise ValueError(f"factors must have shape [B, 5], got {tuple(factors.shape)}")
    shape, scale, orient, pos_x, pos_y = factors.unbind(dim=1)
    t = _render_tables(factors.device)
    cx, cy = t["centre"][pos_x], t["centre"][pos_y]
    offsets = torch.arange(_WINDOW, device=factors.device)
    start_c = (cx.floor().long() - _WINDOW // 2).clamp(0, IMAGE_SIZE - _WINDOW)
    start_r = (cy.floor().long() - _WINDOW // 2).clamp(0, IMAGE_SIZE - _WINDOW)
    cols = start_c[:, None] + offsets  # [B, W] pixel columns of each window
    rows = start_r[:, None] + offsets  # [B, W] pixel rows
    dx = (cols.double() + 0.5)[:, None, :] - cx[:, None, None]  # [B, 1, W]
    dy = cy[:, None, None] - (rows.double() + 0.5)[:, :, None]  # [B, W, 1], y up
    cos, sin = t["cos"][orient][:, None, None], t["sin"][orient][:, None, None]
    x, y = cos * dx + sin * dy, -sin * dx + cos * dy  # [B, W, W], rotate by -angle
    u = t["u"][scale][:, None, None]
    square = torch.maximum(x.abs(), y.abs()) <= t["half_side"][scale][:, None, None]
    ellipse = (x / u) ** 2 + (y / t["half_u"][scale][:, None, None]) ** 2 <= 1
    hx, hy = x * 1.45 / u, y * 1.45 / u
    heart = (hx**2 + hy**2 - 1) ** 3 - hx**2 * hy**3 <= 0
    s = shape[:, None, None]
    inside = torch.where(s == 0, square, torch.where(s == 1, ellipse, heart))
    out = torch.zeros(len(factors), IMAGE_SIZE, IMAGE_SIZE, device=factors.device)
    batch = torch.arange(len(factors), device=factors.device)[:, None, None]
    out[batch, rows[:, :, None], cols[:, None, :]] = inside.float()
    return out[:, None]


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


# Independent random streams derived from one seed (see ``_generator``).
_SPLIT_STREAM, _VIEW_STREAM, _SHUFFLE_STREAM, _EVAL_VIEW_STREAM = 0, 1, 2, 3
_STREAMS = 8


def _generator(seed: int, stream: int, rank: int = 0) -> torch.Generator:
    """A CPU generator for ``(seed, stream, rank)``; distinct triples get distinct seeds."""
    return torch.Generator().manual_seed((seed * 1024 + rank) * _STREAMS + stream)


class _RenderBatch:
    """``collate_fn``: flat grid indices -> rendered ``(images, factors)``, or
    ``(views, factors)`` when an augmentation is given.

    The augmentation generator belongs to this object; in a DataLoader worker it is a
    copy, so :meth:`seed_worker` re-seeds it from the worker's seed (distinct per worker
    and epoch, derived from the loader's seeded generator).
    """

    def __init__(
        self,
        augmentation: SpriteAugmentation | None = None,
        n_views: int = 1,
        generator: torch.Generator | None = None,
        factor_jitter: int = 0,
    ) -> None:
        self.augmentation = augmentation
        self.n_views = n_views
        self.generator = generator
        self.factor_jitter = factor_jitter

    def __call__(self, items: list[tuple[Tensor]]) -> tuple[Tensor | list[Tensor], Tensor]:
        factors = index_to_factors(torch.stack([item[0] for item in items]))
        if self.augmentation is None:
            return render_sprites(factors), factors
        if self.factor_jitter == 0:  # every view augments the same sprite: render it once
            images = render_sprites(factors)
            return [self.augmentation(images, self.generator) for _ in range(self.n_views)], factors
        views = [
            self.augmentation(render_sprites(self._jitter(factors)), self.generator)
            for _ in range(self.n_views)
        ]
        return views, factors

    def _jitter(self, factors: Tensor) -> Tensor:
        """Move every factor by ``U{-k, k}`` steps: orientation wraps, the others clamp."""
        k = self.factor_jitter
        step = torch.randint(-k, k + 1, factors.shape, generator=self.generator)
        sizes = torch.tensor(DSPRITES_FACTOR_SIZES)
        moved = torch.minimum((factors + step).clamp_min(0), sizes - 1)
        moved[:, 2] = (factors[:, 2] + step[:, 2]) % sizes[2]
        moved[:, 0] = factors[:, 0]  # shape is categorical: never "nearby"
        return moved

    def seed_worker(self, worker_id: int) -> None:
        """``worker_init_fn``: give this worker's copy its own augmentation stream."""
        if self.generator is not None:
            self.generator = torch.Generator().manual_seed(torch.initial_seed() % 2**63)


class DSpritesDataModule(L.LightningDataModule):
    """Procedural dSprites for contrastive pre-training and disentanglement metrics.

    ``train_size + val_size + test_size`` distinct grid indices are drawn at construction
    from one seeded permutation of the 737,280 combinations and split in that order, so
    the splits are disjoint and fixed by ``seed``. Images are rendered per batch in the
    ``collate_fn`` (:func:`render_sprites`), never all at once. Training views are drawn
    by a generator seeded at ``setup`` from ``(seed, global rank)``; with workers, each
    worker re-seeds its copy (see ``_RenderBatch.seed_worker``), so runs are reproducible.

    Args:
        train_size: Training sprites (>= batch_size; the last incomplete batch is dropped).
        val_size: Validation sprites (MIG is estimated on them; 10,000 in disentanglement_lib).
        test_size: Test sprites.
        batch_size: Sprites per batch (per device).
        num_workers: DataLoader workers (0: render in the main process; rendering a batch
            of 256 takes ~1 ms and each augmented view ~15 ms on one CPU core).
        n_views: Augmented views per training sprite (2 for contrastive learning).
        seed: Seed of the split, the shuffling and the augmentations (>= 0).
        augmentation: View augmentation; ``None`` uses ``SpriteAugmentation()``.
        factor_jitter: 0 (default): the views are augmentations of the same sprite. ``k >
            0``: each view first moves scale, orientation, posX and posY by ``U{-k, k}``
            steps (orientation wraps, the others clamp; shape is kept), i.e. positives are
            *neighbours in factor space*, the setting in which contrastive learning provably
            recovers the factors up to a rotation (Zimmermann et al., ICML 2021); this uses
            the ground truth, so it is weak supervision, not self-supervision.
        pin_memory: Pin host memory; only effective when CUDA is available.

    Attributes:
        num_classes: 0 (no class labels: batches carry the factors, no online probe).
        in_channels: 1.
        image_size: 64.
        factor_names / factor_sizes: The five ground-truth factors and their sizes.
        train_indices / val_indices / test_indices: Flat grid indices of each split.
    """

    num_classes: int = 0
    in_channels: int = 1
    image_size: int = IMAGE_SIZE
    factor_names: tuple[str, ...] = DSPRITES_FACTOR_NAMES
    factor_sizes: tuple[int, ...] = DSPRITES_FACTOR_SIZES

    def __init__(
        self,
        train_size: int = 50_000,
        val_size: int = 10_000,
        test_size: int = 10_000,
        batch_size: int = 256,
        num_workers: int = 0,
        n_views: int = 2,
        seed: int = 0,
        augmentation: SpriteAugmentation | None = None,
        factor_jitter: int = 0,
        pin_memory: bool = True,
    ) -> None:
        super().__init__()
        for name, value, low in (
            ("train_size", train_size, 1), ("val_size", val_size, 1),
            ("test_size", test_size, 1), ("batch_size", batch_size, 1),
            ("num_workers", num_workers, 0), ("n_views", n_views, 1), ("seed", seed, 0),
            ("factor_jitter", factor_jitter, 0),
        ):  # fmt: skip
            if value < low:
                raise ConfigError(f"DSpritesDataModule {name} must be >= {low}, got {value}")
        total = train_size + val_size + test_size
        if total > DSPRITES_NUM_IMAGES:
            raise ConfigError(
                f"DSpritesDataModule train_size + val_size + test_size must be <= "
                f"{DSPRITES_NUM_IMAGES}, got {total}"
            )
        if batch_size > train_size:
            raise ConfigError(
                f"DSpritesDataModule batch_size must be <= train_size={train_size} "
                f"(drop_last), got {batch_size}"
            )
        self.save_hyperparameters()
        self.train_size, self.val_size, self.test_size = train_size, val_size, test_size
        self.batch_size, self.num_workers, self.n_views = batch_size, num_workers, n_views
        self.seed, self.pin_memory, self.factor_jitter = seed, pin_memory, factor_jitter
        self.augmentation = augmentation if augmentation is not None else SpriteAugmentation()
        perm = torch.randperm(DSPRITES_NUM_IMAGES, generator=_generator(seed, _SPLIT_STREAM))
        self.train_indices = perm[:train_size].clone()
        self.val_indices = perm[train_size : train_size + val_size].clone()
        self.test_indices = perm[train_size + val_size : total].clone()
        self._view_generator: torch.Generator | None = None
        self._shuffle_generator: torch.Generator | None = None

    def split_indices(self, split: str) -> Tensor:
        """Flat grid indices of ``"train"``, ``"val"`` or ``"test"``."""
        splits = {"train": self.train_indices, "val": self.val_indices, "test": self.test_indices}
        if split not in splits:
            raise ValueError(f"split must be one of {list(splits)}, got {split!r}")
        return splits[split]

    def check_inputs(self, stage: str | None = None, world_size: int = 1) -> None:
        """Check that every rank gets one training batch (generated data: no files).

        Raises:
            DataError: ``train_size // world_size < batch_size`` when fitting.
        """
        if stage in ("fit", None):
            hint = " or raise data.init_args.train_size"
            check_train_batches(self.train_size, world_size, self.batch_size, True, hint)

    def setup(self, stage: str | None = None) -> None:
        """(Re)seed the view and shuffle generators from ``(seed, global rank)``."""
        self.check_inputs(stage, self.trainer.world_size if self.trainer is not None else 1)
        rank = self.trainer.global_rank if self.trainer is not None else 0
        self._view_generator = _generator(self.seed, _VIEW_STREAM, rank)
        self._shuffle_generator = _generator(self.seed, _SHUFFLE_STREAM, rank)

    def _loader(
        self, indices: Tensor, collate: _RenderBatch, train: bool = False, **kwargs: object
    ) -> DataLoader:
        workers = self.num_workers
        return DataLoader(
            TensorDataset(indices),
            batch_size=self.batch_size,
            shuffle=train,
            drop_last=train,
            collate_fn=collate,
            worker_init_fn=collate.seed_worker if workers > 0 else None,
            num_workers=workers,
            persistent_workers=train and workers > 0,
            pin_memory=self.pin_memory and torch.cuda.is_available(),
            **kwargs,  # type: ignore[arg-type]
        )

    def train_dataloader(self) -> DataLoader:
        """Shuffled ``(views, factors)``: ``n_views`` tensors ``[B, 1, 64, 64]``, ``[B, 5]``."""
        if self._view_generator is None:
            raise RuntimeError("DSpritesDataModule generators are not seeded; call setup() first")
        collate = _RenderBatch(
            self.augmentation, self.n_views, self._view_generator, self.factor_jitter
        )
        return self._loader(
            self.train_indices, collate, train=True, generator=self._shuffle_generator
        )

    def val_dataloader(self) -> DataLoader:
        """Clean ``(images [B, 1, 64, 64], factors [B, 5])`` of the validation split."""
        return self._loader(self.val_indices, _RenderBatch())

    def test_dataloader(self) -> DataLoader:
        """Clean ``(images [B, 1, 64, 64], factors [B, 5])`` of the test split."""
        return self._loader(self.test_indices, _RenderBatch())

    def predict_dataloader(self) -> DataLoader:
        """Same as ``test_dataloader``."""
        return self.test_dataloader()

    def clean_dataloader(self, split: str, rank: int = 0, world_size: int = 1) -> DataLoader:
        """Clean ``(images, factors)`` of ``split`` in order, no batch dropped, without
        ``setup``; rank ``rank`` of ``world_size`` gets samples ``rank::world_size``."""
        return self._loader(self.split_indices(split)[rank::world_size], _RenderBatch())

    def view_dataloader(self, split: str, rank: int = 0, world_size: int = 1) -> DataLoader:
        """Augmented ``(views, factors)`` of an evaluation split, in order (SEPIN).

        The views are the same at every call (generators seeded from ``(seed, rank)``);
        rank ``rank`` of ``world_size`` gets samples ``rank::world_size``.
        """
        if split == "train":
            raise ValueError("view_dataloader is for evaluation splits ('val', 'test')")
        generator = _generator(self.seed, _EVAL_VIEW_STREAM, rank)
        collate = _RenderBatch(self.augmentation, self.n_views, generator, self.factor_jitter)
        # The loader's own generator fixes the worker seeds (used only with workers).
        worker_seeds = _generator(self.seed, _EVAL_VIEW_STREAM, rank)
        indices = self.split_indices(split)[rank::world_size]
        return self._loader(indices, collate, generator=worker_seeds)
