"""Randomness of the training data as a pure function of (seed, epoch, sample).

A resumed run must see exactly the batches and views the uninterrupted run would have
seen, with any number of workers, persistent or not. Re-seeding a global generator is
fragile under Lightning's order of hooks, so nothing here reads a global RNG:
[`EpochSampler`][] yields ``(index, sample_seed)`` keys drawn from ``(seed, epoch)``,
[`SeededTransformDataset`][] applies its transform under the key's seed, and vectorised
data (dSprites, sparse coding) draws a batch's randomness from [`batch_seed`][] of its
keys ([`KeyDataset`][]). Data drawn once at construction uses ``seeded_generator(seed,
DATA_KEY, stream)``. [`ResumableData`][] keeps the position in checkpoints.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Sampler

from ncl_lightning.data.batch_scope import ScopedBatch, check_train_batches
from ncl_lightning.foundation.internals import (
    batches_fetched_total,
    batches_processed,
    epochs_processed,
)
from ncl_lightning.foundation.validation import check_int, check_range

_MASK = (1 << 64) - 1
EVAL_KEY = -1
"""The "epoch" of evaluation views: ``mix_seed(seed, EVAL_KEY, i)`` is no training key."""
DATA_KEY = -2
"""The "epoch" of data drawn once at construction: ``seeded_generator(seed, DATA_KEY, stream)``."""


def _mixed_state(values: tuple[int, ...]) -> int:
    """SplitMix64's finaliser folded over ``values``: the 64-bit state of ``mix_seed``."""
    state = 0x9E3779B97F4A7C15
    for value in values:
        state = (state ^ (int(value) & _MASK)) * 0xBF58476D1CE4E5B9 & _MASK
        state = (state ^ (state >> 27)) * 0x94D049BB133111EB & _MASK
        state ^= state >> 31
    return state


def mix_seed(*values: int) -> int:
    """A well-mixed 63-bit seed from integers (SplitMix64 finaliser over each value).

    Args:
        *values: Integers, e.g. ``(seed, epoch, index)``.

    Returns:
        An int in ``[0, 2**63)``; changing any value changes it unpredictably.
    """
    return _mixed_state(values) >> 1


def mix_seeds(prefix: tuple[int, ...], last: list[int]) -> list[int]:
    """``[mix_seed(*prefix, v) for v in last]``, vectorised (numpy's uint64 arithmetic
    wraps modulo 2**64 as the mask does): an epoch's keys without a Python call each."""
    state = np.uint64(_mixed_state(prefix))
    values = np.asarray([int(v) & _MASK for v in last], dtype=np.uint64)
    mixed = (state ^ values) * np.uint64(0xBF58476D1CE4E5B9)
    mixed = (mixed ^ (mixed >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    mixed ^= mixed >> np.uint64(31)
    return (mixed >> np.uint64(1)).tolist()


def seeded_generator(*values: int) -> torch.Generator:
    """A private CPU generator seeded with ``mix_seed(*values)`` (the global one is untouched)."""
    return torch.Generator().manual_seed(mix_seed(*values))


def batch_seed(keys: Sequence[tuple[int, int]]) -> int:
    """One seed for a batch of ``(index, sample_seed)`` keys: a function of its samples'
    seeds only, so the batch's randomness is the same in any worker and after a resume."""
    return mix_seed(*(key[1] for key in keys))


def global_seed() -> int:
    """The run's seed: ``seed_everything``'s (``PL_GLOBAL_SEED``), else torch's initial seed."""
    value = os.environ.get("PL_GLOBAL_SEED")
    return int(value) if value not in (None, "") else torch.initial_seed() % 2**63


class EpochSampler(DistributedSampler):
    """Shuffled ``(index, sample_seed)`` keys of one epoch, for this rank.

    Args:
        dataset: The map-style training dataset (only its length is used).
        seed_fn: Returns the run's seed when an epoch starts (read lazily, so a seed
            restored from a checkpoint is used).
        epoch_fn: Returns the epoch being started (read lazily: Lightning makes the first
            iterator of a process before it calls ``set_epoch``).
        num_replicas: Number of ranks.
        rank: This rank.
        shuffle: Draw a permutation (else the natural order).
        skip_fn: Returns how many of this rank's keys of the epoch were already trained
            on (a run resumed from a mid-epoch checkpoint goes on with the next batch);
            the length stays the epoch's, which Lightning's batch counts expect.
    """

    def __init__(
        self,
        dataset: Dataset,
        seed_fn: Callable[[], int],
        epoch_fn: Callable[[], int],
        num_replicas: int = 1,
        rank: int = 0,
        shuffle: bool = True,
        skip_fn: Callable[[], int] = lambda: 0,
    ) -> None:
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=shuffle)
        self.seed_fn = seed_fn
        self.epoch_fn = epoch_fn
        self.skip_fn = skip_fn

    def indices(self, seed: int, epoch: int) -> list[int]:
        """The dataset indices this rank visits in ``epoch`` (padded to equal shards)."""
        n = len(self.dataset)  # type: ignore[arg-type]
        if self.shuffle:
            order = torch.randperm(n, generator=seeded_generator(seed, epoch)).tolist()
        else:
            order = list(range(n))
        order += order[: self.total_size - n]  # pad like DistributedSampler
        return order[self.rank : self.total_size : self.num_replicas]

    def __iter__(self) -> Iterator[tuple[int, int]]:  # type: ignore[override]
        seed, epoch = self.seed_fn(), self.epoch_fn()
        indices = self.indices(seed, epoch)[self.skip_fn() :]
        # A list's iterator: no Python frame per sample (the loader asks per batch).
        return iter(list(zip(indices, mix_seeds((seed, epoch), indices), strict=True)))


class EvalViewSampler(Sampler[tuple[int, int]]):
    """``(index, sample_seed)`` keys of one rank's batches of an evaluation split (SEPIN).

    The split is put in a seeded random order, ``randperm`` of a generator seeded with
    ``(seed, EVAL_KEY)`` (the same on every rank), and cut into consecutive batches of
    ``batch_size``; batch ``b`` goes to rank ``b mod world_size``. The batches, hence the
    in-batch negatives of each pair, are then the same for any number of ranks, and on a
    class-sorted folder they mix the classes. The last incomplete batch is dropped when a
    full one exists (SEPIN's InfoNCE bound depends on the batch size). Sample ``i`` has the
    seed ``mix_seed(seed, EVAL_KEY, i)`` at every iteration, so with
    [`SeededTransformDataset`][] its views depend only on ``(seed, i)``.

    Args:
        size: Samples in the split.
        seed: The run's seed (``None``: [`global_seed`][]).
        rank: This rank.
        world_size: Ranks sharing the split.
        batch_size: Samples per batch (the loader's ``batch_size``; 1 shards sample by
            sample).
    """

    def __init__(
        self,
        size: int,
        seed: int | None,
        rank: int = 0,
        world_size: int = 1,
        batch_size: int = 1,
    ) -> None:
        check_range("rank", rank, 0, world_size, "[)")
        check_int("batch_size", batch_size)
        self.seed = global_seed() if seed is None else seed
        order = torch.randperm(size, generator=seeded_generator(self.seed, EVAL_KEY))
        batches = list(order.split(batch_size))
        if len(batches) > 1 and len(batches[-1]) < batch_size:
            batches.pop()
        mine = batches[rank::world_size]
        self.indices: list[int] = torch.cat(mine).tolist() if mine else []

    def __len__(self) -> int:
        return len(self.indices)

    def __iter__(self) -> Iterator[tuple[int, int]]:
        for index in self.indices:
            yield index, mix_seed(self.seed, EVAL_KEY, index)


class ResumableData(ScopedBatch):
    """DataModule mixin: the training data's position, kept in checkpoints.

    Needs ``trainer``, ``seed`` (the training data's seed), ``batch_size`` (with
    ``batch_scope``: [`ScopedBatch`][ncl_lightning.data.batch_scope.ScopedBatch]) and ``resumed``
    (``(epoch, batches done)`` of the checkpoint resumed from, ``(0, 0)`` if none).
    """

    seed: int | None
    resumed: tuple[int, int]

    def state_dict(self) -> dict[str, Any]:
        """The training data's seed, the epoch being loaded and its batches done: a resumed
        run draws the batches and views the uninterrupted run would have drawn."""
        if self.seed is None:
            return {}
        return {"seed": self.seed, "epoch": self.train_epoch(), "batches": self.batches_done()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore [`state_dict`][] (Lightning calls it before the first training iterator)."""
        if state_dict.get("seed") is not None:
            self.seed = int(state_dict["seed"])
        self.resumed = int(state_dict.get("epoch", 0)), int(state_dict.get("batches", 0))

    def train_epoch(self) -> int:
        """The training epoch being loaded: Lightning's count of processed epochs, or the
        checkpoint's when larger (Lightning makes the first iterator of a resumed run, to
        count its batches, before it restores its loop)."""
        trainer = self.trainer
        processed = epochs_processed(trainer)
        return max(processed, self.resumed[0])

    def batches_done(self) -> int:
        """Batches of the unfinished training epoch already trained on, for a checkpoint
        written now (0 once its last batch is done: a resume starts the next epoch).
        ``processed``, not ``completed``: a checkpoint saved in ``on_train_batch_end``
        counts its batch as done (Lightning completes it when restoring)."""
        if self.trainer is None:
            return 0
        done = batches_processed(self.trainer)
        return done if done < self.trainer.num_training_batches else 0

    def skipped_samples(self) -> int:
        """This rank's samples of the epoch being loaded that were trained on before the
        mid-epoch checkpoint resumed from (0 in any other epoch)."""
        epoch, batches = self.resumed
        return batches * self.per_device_batch_size if self.train_epoch() == epoch else 0

    def _batch_seed(self) -> int:
        # One seed per training batch and rank, from the run's seed and the loop's
        # batch count (restored on resume): the device views of a batch are reproducible.
        trainer = self.trainer
        rank = trainer.global_rank if trainer is not None else 0
        count = batches_fetched_total(trainer)
        return mix_seed(self.seed or 0, rank, count)

    def train_sampler(self, dataset: Dataset) -> EpochSampler:
        """The [`EpochSampler`][] of the training loader: keys from (seed, epoch, sample),
        sharded over the trainer's ranks, skipping the batches a resumed run already did."""
        trainer = self.trainer
        return EpochSampler(
            dataset,
            seed_fn=lambda: self.seed or 0,
            epoch_fn=self.train_epoch,
            num_replicas=trainer.world_size if trainer is not None else 1,
            rank=trainer.global_rank if trainer is not None else 0,
            skip_fn=self.skipped_samples,
        )


class GeneratedData(ResumableData):
    """[`ResumableData`][] of a DataModule whose data is generated in memory (no files):
    ``setup`` only runs [`check_inputs`][]. ``size_key`` names the attribute (and config
    key) of the training split's size."""

    size_key: str

    def check_inputs(self, stage: str | None = None, world_size: int = 1) -> None:
        """Check that every rank gets one training batch when fitting.

        Raises:
            DataError: Fewer training samples per rank than ``batch_size``.
        """
        if stage in ("fit", None):
            size, hint = getattr(self, self.size_key), f" or raise data.init_args.{self.size_key}"
            check_train_batches(size, world_size, self.batch_size, True, hint)

    def setup(self, stage: str | None = None) -> None:
        """Check the inputs for ``stage`` (the data is generated: nothing to build)."""
        self.check_inputs(stage, self.trainer.world_size if self.trainer is not None else 1)


class ResumableLoader(DataLoader):
    """The training ``DataLoader`` of a [`ResumableData`][] DataModule.

    Its position (epoch, batches done) is saved and restored with the DataModule's state,
    and its [`EpochSampler`][] skips the batches already trained on; these two methods
    tell Lightning that a mid-epoch checkpoint resumes exactly (it warns otherwise).
    """

    def state_dict(self) -> dict[str, Any]:
        return {}  # kept by the DataModule (ResumableData.state_dict)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Nothing to restore here: the DataModule's state is restored first."""


class KeyDataset(Dataset):
    """``size`` samples whose item ``key`` is the key itself.

    With a ``collate_fn`` that builds a whole batch from its keys (vectorised data), the
    loader hands it the batch's ``(index, sample_seed)`` keys of [`EpochSampler`][] or
    [`EvalViewSampler`][], or plain indices, in one call (``__getitems__``).

    Args:
        size: Number of samples.
    """

    def __init__(self, size: int) -> None:
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, key: Any) -> Any:
        return key

    def __getitems__(self, keys: list[Any]) -> list[Any]:
        return keys


class TransformedDataset(Dataset):
    """Apply ``transform`` to the image of every ``(image, label)`` pair of ``dataset``.

    Takes a plain index or the ``(index, sample_seed)`` keys of [`EpochSampler`][]
    (whose seed it ignores: use it for transforms that are not random).

    Args:
        dataset: Map-style dataset of ``(image, label)`` with untransformed images.
        transform: Callable applied to each image (e.g. a ``MultiView``).
    """

    def __init__(self, dataset: Dataset, transform: Callable[[Any], Any]) -> None:
        self.dataset = dataset
        self.transform = transform

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, key: int | tuple[int, int]) -> tuple[Any, int]:
        image, label = self.dataset[key[0] if isinstance(key, tuple) else key]
        return self.transform(image), int(label)


class SeededTransformDataset(TransformedDataset):
    """``(transform(image), label)`` with the transform's randomness fixed by the key.

    The transform draws from torch's global CPU generator (torchvision transforms do). With
    an ``(index, sample_seed)`` key from [`EpochSampler`][] the generator is set to the
    sample's seed for the call and restored after it; a plain ``int`` index uses the
    generator as it is.
    """

    def __getitem__(self, key: int | tuple[int, int]) -> tuple[Any, int]:
        if not isinstance(key, tuple):
            return super().__getitem__(key)
        generator = torch.default_generator
        state = generator.get_state()
        generator.manual_seed(key[1])
        try:
            return super().__getitem__(key)
        finally:
            generator.set_state(state)


__all__ = [
    "DATA_KEY",
    "EVAL_KEY",
    "EpochSampler",
    "EvalViewSampler",
    "GeneratedData",
    "KeyDataset",
    "ResumableData",
    "ResumableLoader",
    "SeededTransformDataset",
    "TransformedDataset",
    "batch_seed",
    "global_seed",
    "mix_seed",
    "seeded_generator",
]
