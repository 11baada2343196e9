"""dSprites DataModule: procedural 64x64 sprites over five ground-truth factors, no download.

The NCL paper (Wang et al., ICLR 2024, Table 6) evaluates disentanglement on dSprites
(Matthey et al., 2017); the grid and its renderer live in
[`ncl_lightning.data.sprite_render`][]. Randomness follows [`ncl_lightning.data.seeding`][]:
the epoch's order from ``(seed, epoch)``, a batch's views from [`batch_seed`][] of its
keys, so any number of workers and a mid-epoch resume give the same batches.
"""

from __future__ import annotations

from collections.abc import Sequence

import lightning as L
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Sampler

from ncl_lightning.data.loader_defaults import describe_loader, loader_options
from ncl_lightning.data.seeding import (
    DATA_KEY,
    EvalViewSampler,
    GeneratedData,
    KeyDataset,
    ResumableLoader,
    batch_seed,
    seeded_generator,
)
from ncl_lightning.data.sprite_augmentation import SpriteAugmentation
from ncl_lightning.data.sprite_render import (
    DSPRITES_FACTOR_NAMES,
    DSPRITES_FACTOR_SIZES,
    DSPRITES_NUM_IMAGES,
    DSPRITES_SHAPES,
    IMAGE_SIZE,
    DSpritesDataset,
    factor_values,
    factors_to_index,
    index_to_factors,
    render_sprite,
    render_sprites,
)
from ncl_lightning.data.sprite_simclr import SimCLRSpriteViews
from ncl_lightning.data.transforms import SimCLRAugmentation
from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.foundation.validation import check_choice, check_int

Key = int | tuple[int, int]
SpriteViews = SpriteAugmentation | SimCLRSpriteViews


class RenderBatch:
    """``collate_fn``: the keys of a batch (positions in ``grid_indices`` ``[N]``, or
    ``(position, sample_seed)`` pairs) -> rendered ``(images, factors)``, or ``n_views``
    ``(views, factors)`` of ``augmentation(images, generator)`` with a generator seeded
    by [`batch_seed`][] of the keys; ``factor_jitter``: see [`DSpritesDataModule`][]."""

    def __init__(
        self,
        grid_indices: Tensor,
        augmentation: SpriteViews | None = None,
        n_views: int = 1,
        factor_jitter: int = 0,
    ) -> None:
        self.grid_indices = grid_indices
        self.augmentation = augmentation
        self.n_views = n_views
        self.factor_jitter = factor_jitter

    def __call__(self, keys: Sequence[Key]) -> tuple[Tensor | list[Tensor], Tensor]:
        positions = torch.tensor([key[0] if isinstance(key, tuple) else key for key in keys])
        factors = index_to_factors(self.grid_indices.index_select(0, positions))
        if self.augmentation is None:
            return render_sprites(factors), factors
        generator = seeded_generator(batch_seed(keys))  # type: ignore[arg-type]
        if self.factor_jitter == 0:  # every view augments the same sprite: render it once
            images = render_sprites(factors)
            return [self.augmentation(images, generator) for _ in range(self.n_views)], factors
        views = [
            self.augmentation(render_sprites(self.jitter(factors, generator)), generator)
            for _ in range(self.n_views)
        ]
        return views, factors

    def jitter(self, factors: Tensor, generator: torch.Generator) -> Tensor:
        """Move every factor of ``factors`` ``[B, 5]`` by ``U{-k, k}`` steps: orientation
        wraps, shape is kept (categorical: never "nearby"), the others clamp."""
        k = self.factor_jitter
        step = torch.randint(-k, k + 1, factors.shape, generator=generator)
        sizes = torch.tensor(DSPRITES_FACTOR_SIZES)
        moved = torch.minimum((factors + step).clamp_min(0), sizes - 1)
        moved[:, 2] = (factors[:, 2] + step[:, 2]) % sizes[2]
        moved[:, 0] = factors[:, 0]
        return moved


class DSpritesDataModule(GeneratedData, L.LightningDataModule):
    """Procedural dSprites for contrastive pre-training and disentanglement metrics.

    ``train_size + val_size + test_size`` distinct grid indices are drawn at construction
    from one permutation of the 737,280 combinations (``seeded_generator(seed, DATA_KEY)``)
    and split in that order, so the splits are disjoint and fixed by ``seed``. Images are
    rendered per batch in the ``collate_fn`` ([`render_sprites`][]), never all at once;
    training views come from ``(seed, epoch, sample)`` (see the module docstring).

    Args:
        train_size: Training sprites (>= batch_size; the last incomplete batch is dropped).
        val_size: Validation sprites (MIG is estimated on them; 10,000 in disentanglement_lib).
        test_size: Test sprites.
        batch_size: Sprites per batch (per device).
        num_workers: DataLoader workers (0: render in the main process; rendering a batch
            of 256 takes ~1 ms and each augmented view ~15 ms on one CPU core).
        n_views: Augmented views per training sprite (2 for contrastive learning).
        seed: Seed of the split, the shuffling and the augmentations (>= 0).
        augmentation: View augmentation. A [`SpriteAugmentation`][] (default
            ``SpriteAugmentation()``) only perturbs pixels and keeps every factor; a
            one-channel [`SimCLRAugmentation`][ncl_lightning.data.SimCLRAugmentation] with
            ``crop_size: 64`` gives SimCLR's views, the NCL paper's setting (App. F.1;
            recipe: [`sprite_simclr_augmentation`][ncl_lightning.data.sprite_simclr_augmentation]),
            which move and mirror the sprites.
        factor_jitter: 0 (default): the views are augmentations of the same sprite. ``k >
            0``: each view first moves scale, orientation, posX and posY by ``U{-k, k}``
            steps (orientation wraps, the others clamp; shape is kept), i.e. positives are
            *neighbours in factor space*, the setting in which contrastive learning provably
            recovers the factors up to a rotation (Zimmermann et al., ICML 2021); this uses
            the ground truth, so it is weak supervision, not self-supervision.
        pin_memory: Pin host memory; only effective when CUDA is available.
        prefetch_factor: Batches each worker renders ahead; ``None`` keeps torch's
            default (2); only when ``num_workers > 0`` (ignored otherwise).

    Attributes:
        num_classes: 0 (no class labels: batches carry the factors, no online probe).
        in_channels: 1.
        image_size: 64.
        factor_names / factor_sizes: The five ground-truth factors and their sizes.
        train_indices / val_indices / test_indices: Flat grid indices of each split.
    """

    num_classes: int = 0
    size_key = "train_size"
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
        augmentation: SpriteAugmentation | SimCLRAugmentation | None = None,
        factor_jitter: int = 0,
        pin_memory: bool = True,
        prefetch_factor: int | None = None,
    ) -> None:
        super().__init__()
        for name, value, low in (
            ("train_size", train_size, 1), ("val_size", val_size, 1),
            ("test_size", test_size, 1), ("batch_size", batch_size, 1),
            ("num_workers", num_workers, 0), ("n_views", n_views, 1), ("seed", seed, 0),
            ("factor_jitter", factor_jitter, 0),
        ):  # fmt: skip
            check_int(name, value, low)
        if prefetch_factor is not None:
            check_int("prefetch_factor", prefetch_factor)
        total = train_size + val_size + test_size
        if total > DSPRITES_NUM_IMAGES:
            raise ConfigError(
                f"DSpritesDataModule train_size + val_size + test_size must be <= "
                f"{DSPRITES_NUM_IMAGES}, got {total}",
                key="train_size",
            )
        if batch_size > train_size:
            raise ConfigError(
                f"DSpritesDataModule batch_size must be <= train_size={train_size} "
                f"(drop_last), got {batch_size}",
                key="batch_size",
            )
        self.save_hyperparameters()
        self.train_size, self.val_size, self.test_size = train_size, val_size, test_size
        self.batch_size, self.num_workers, self.n_views = batch_size, num_workers, n_views
        self.seed: int | None = seed  # the training data's seed, kept in checkpoints
        self.pin_memory, self.factor_jitter = pin_memory, factor_jitter
        self.prefetch_factor = prefetch_factor
        self.resumed = (0, 0)  # (epoch, batches done) of the checkpoint resumed from
        self.augmentation = augmentation if augmentation is not None else SpriteAugmentation()
        self.views: SpriteViews = (
            SimCLRSpriteViews(self.augmentation, IMAGE_SIZE)
            if isinstance(self.augmentation, SimCLRAugmentation)
            else self.augmentation
        )
        perm = torch.randperm(DSPRITES_NUM_IMAGES, generator=seeded_generator(seed, DATA_KEY))
        self.train_indices = perm[:train_size].clone()
        self.val_indices = perm[train_size : train_size + val_size].clone()
        self.test_indices = perm[train_size + val_size : total].clone()

    def split_indices(self, split: str) -> Tensor:
        """Flat grid indices of ``"train"``, ``"val"`` or ``"test"``."""
        splits = {"train": self.train_indices, "val": self.val_indices, "test": self.test_indices}
        check_choice("split", split, splits)
        return splits[split]

    def _loader(
        self, collate: RenderBatch, sampler: Sampler | None = None, train: bool = False
    ) -> DataLoader:
        return (ResumableLoader if train else DataLoader)(
            KeyDataset(len(collate.grid_indices)),
            batch_size=self.batch_size,
            sampler=sampler,
            drop_last=train,
            collate_fn=collate,
            generator=seeded_generator(self.seed or 0),  # private: global untouched
            **loader_options(self.num_workers, self.pin_memory, train, self.prefetch_factor),
        )

    def loader_summary(self) -> str:
        """The training loader's settings for the batch line of ``fit``."""
        pinned = self.pin_memory and torch.cuda.is_available()
        return describe_loader(self.num_workers, "configured", pinned, True, self.prefetch_factor)

    def train_dataloader(self) -> DataLoader:
        """Shuffled ``(views, factors)``: ``n_views`` tensors ``[B, 1, 64, 64]``, ``[B, 5]``."""
        collate = RenderBatch(self.train_indices, self.views, self.n_views, self.factor_jitter)
        return self._loader(collate, self.train_sampler(KeyDataset(self.train_size)), True)

    def val_dataloader(self) -> DataLoader:
        """Clean ``(images [B, 1, 64, 64], factors [B, 5])`` of the validation split."""
        return self._loader(RenderBatch(self.val_indices))

    def test_dataloader(self) -> DataLoader:
        """Clean ``(images [B, 1, 64, 64], factors [B, 5])`` of the test split."""
        return self._loader(RenderBatch(self.test_indices))

    def predict_dataloader(self) -> DataLoader:
        """Same as ``test_dataloader``."""
        return self.test_dataloader()

    def clean_dataloader(self, split: str, rank: int = 0, world_size: int = 1) -> DataLoader:
        """Clean ``(images, factors)`` of ``split`` in order, no batch dropped, without
        ``setup``; rank ``rank`` of ``world_size`` gets samples ``rank::world_size``."""
        return self._loader(RenderBatch(self.split_indices(split)[rank::world_size]))

    def clean_train_dataloader(self, rank: int = 0, world_size: int = 1) -> DataLoader:
        """[`clean_dataloader`][] of the training split."""
        return self.clean_dataloader("train", rank, world_size)

    def view_dataloader(self, split: str, rank: int = 0, world_size: int = 1) -> DataLoader:
        """Augmented ``(views, factors)`` of an evaluation split (SEPIN).

        The split in a random order seeded by ``seed``, cut into batches of ``batch_size``;
        rank ``rank`` of ``world_size`` gets batches ``rank::world_size`` (the last
        incomplete batch dropped if a full one exists). The views of a batch depend only on
        ``(seed, its samples)`` ([`EvalViewSampler`][] keys): the same at every call,
        with any number of workers or ranks and after a resume.
        """
        check_choice("split", split, ("val", "test"))
        indices = self.split_indices(split)
        keys = EvalViewSampler(len(indices), self.seed, rank, world_size, self.batch_size)
        collate = RenderBatch(indices, self.views, self.n_views, self.factor_jitter)
        return self._loader(collate, keys)


__all__ = [
    "DSPRITES_FACTOR_NAMES",
    "DSPRITES_FACTOR_SIZES",
    "DSPRITES_NUM_IMAGES",
    "DSPRITES_SHAPES",
    "DSpritesDataModule",
    "DSpritesDataset",
    "RenderBatch",
    "factor_values",
    "factors_to_index",
    "index_to_factors",
    "render_sprite",
    "render_sprites",
]
