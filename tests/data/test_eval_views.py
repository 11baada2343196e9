"""The augmented views of evaluation splits (SEPIN) are a pure function of (seed, sample).

They must not depend on torch's global generator (whose state after a resume differs from
the uninterrupted run's), on the number of loader workers or ranks, and drawing them must
leave the training process' own random stream untouched. Their batches are cut from one
seeded permutation of the split: they mix the classes of a class-sorted folder and are the
same batches for any number of ranks.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch
from torch import Tensor

from ncl_lightning.data import DigitsDataModule, ImageFolderDataModule, cifar_augmentation
from ncl_lightning.data.seeding import EVAL_KEY, EvalViewSampler, mix_seed


def _draw(dm: DigitsDataModule, rank: int = 0, world_size: int = 1) -> list[list[Tensor]]:
    """Every batch of the validation views: ``[views..., labels]`` per batch."""
    return [[*views, labels] for views, labels in dm.view_dataloader("val", rank, world_size)]


def _equal(a: list[list[Tensor]], b: list[list[Tensor]]) -> bool:
    return len(a) == len(b) and all(
        len(x) == len(y) and all(torch.equal(s, t) for s, t in zip(x, y, strict=True))
        for x, y in zip(a, b, strict=True)
    )


def _module(workers: int = 0, seed: int = 5) -> DigitsDataModule:
    dm = DigitsDataModule(batch_size=64, num_workers=workers)
    dm.seed = seed  # the training data's seed, as setup or a checkpoint sets it
    return dm


def test_views_ignore_the_global_generator_and_leave_it_untouched() -> None:
    dm = _module()
    torch.manual_seed(123)
    first = _draw(dm)
    torch.rand(1000)  # another state of the global generator
    before = torch.get_rng_state()
    second = _draw(dm)
    assert torch.equal(torch.get_rng_state(), before), "drawing views moved the global stream"
    assert _equal(first, second)
    views = first[0]
    assert not torch.equal(views[0], views[1]), "the two views of an image are identical"
    other = _module(seed=6)
    assert not torch.equal(_draw(other)[0][0], views[0]), "the views ignore the seed"


@pytest.mark.parametrize("workers", [2])
def test_views_do_not_depend_on_workers_or_ranks(workers: int) -> None:
    single = _draw(_module(0))
    torch.manual_seed(7)
    assert _equal(_draw(_module(workers)), single)
    # Rank r of W gets batches r::W of the single process, with the same views: the
    # batches (SEPIN's in-batch negatives) do not depend on the number of ranks.
    for world in (2, 3):
        for rank in range(world):
            assert _equal(_draw(_module(0), rank, world), single[rank::world])


def test_sampler_is_one_seeded_permutation_whatever_the_world_size() -> None:
    """The ranks' batches, put back in batch order, are the world-size-1 order: a seeded
    permutation (the same for the same seed, another for another seed) with every sample
    once, less the dropped incomplete last batch."""
    size, batch = 1000, 64

    def order(seed: int, world: int) -> list[int]:
        shards = [EvalViewSampler(size, seed, r, world, batch).indices for r in range(world)]
        per_rank = [[s[i : i + batch] for i in range(0, len(s), batch)] for s in shards]
        count = sum(
            len(b) for b in per_rank
        )  # global batch g is batch g // world of rank g % world
        return [x for g in range(count) for x in per_rank[g % world][g // world]]

    single = order(5, 1)
    assert len(single) == size // batch * batch and len(set(single)) == len(single)
    assert single != sorted(single), "the order is not shuffled"
    assert order(5, 2) == order(5, 4) == single
    assert order(5, 1) == single and order(6, 1) != single
    # A split smaller than one batch is one batch, on rank 0.
    assert sorted(EvalViewSampler(10, 5, 0, 2, batch).indices) == list(range(10))
    assert EvalViewSampler(10, 5, 1, 2, batch).indices == []


def test_view_batches_of_a_class_sorted_folder_mix_classes(cifar_subset: Path) -> None:
    """On the real CIFAR folder (classes in order on disk) every view batch of 64 holds
    most of the 10 classes; the in-order clean batches hold one or two."""
    cheap = replace(cifar_augmentation(), jitter_p=0.0, blur_p=0.0)  # only labels matter
    dm = ImageFolderDataModule(
        root=str(cifar_subset), batch_size=64, num_workers=0, augmentation=cheap
    )
    dm.seed = 0
    in_order = [labels.unique().numel() for _, labels in dm.clean_dataloader("val")]
    assert max(in_order) <= 2
    mixed = [labels.unique().numel() for _, labels in dm.view_dataloader("val")]
    assert len(mixed) == len(in_order) - 1  # the incomplete last batch is dropped
    assert min(mixed) >= 8, mixed


def test_eval_key_is_never_a_training_epoch() -> None:
    # Training views of sample i in epoch e use mix_seed(seed, e, i) with e >= 0.
    assert EVAL_KEY < 0
    assert mix_seed(5, EVAL_KEY, 3) != mix_seed(5, 0, 3)


def test_mix_seeds_is_mix_seed_of_every_value() -> None:
    """The vectorised per-sample keys of an epoch equal the scalar ones, edge values
    included (negative, 0, 2**64 - 1: masked to 64 bits as the scalar masks them)."""
    from ncl_lightning.data.seeding import mix_seed, mix_seeds

    last = [*range(0, 5000, 37), 0, -1, 2**64 - 1, 2**63]
    for prefix in [(0, 0), (123, 5), (2**62 + 7, 3), (-5, 1), ()]:
        assert mix_seeds(prefix, last) == [mix_seed(*prefix, v) for v in last], prefix
