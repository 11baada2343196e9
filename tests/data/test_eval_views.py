"""The augmented views of evaluation splits (SEPIN) are a pure function of (seed, sample).

They must not depend on torch's global generator (whose state after a resume differs from
the uninterrupted run's), on the number of loader workers or ranks, and drawing them must
leave the training process' own random stream untouched.
"""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from ncl_lightning.data import DigitsDataModule
from ncl_lightning.data.seeding import EVAL_KEY, mix_seed


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
    # Rank r of 2 gets samples r::2, each with the views the single process gave it.
    dm = _module(0)
    dm.batch_size = 1
    whole = _draw(dm)
    for rank in (0, 1):
        assert _equal(_draw(dm, rank, 2), whole[rank::2])


def test_eval_key_is_never_a_training_epoch() -> None:
    # Training views of sample i in epoch e use mix_seed(seed, e, i) with e >= 0.
    assert EVAL_KEY < 0
    assert mix_seed(5, EVAL_KEY, 3) != mix_seed(5, 0, 3)
