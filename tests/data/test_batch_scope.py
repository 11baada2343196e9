"""``batch_scope: global``: the configured batch is split over the ranks, refused when it
does not divide, and the W ranks' batches together are the 1-process run's batches."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from ncl_lightning.data import DigitsDataModule
from ncl_lightning.data.batch_scope import check_train_batches, per_device_batch
from ncl_lightning.foundation.errors import ConfigError, DataError


def _fake_trainer(world: int, rank: int) -> SimpleNamespace:
    """What the DataModule reads of a trainer: ranks and the epoch being loaded."""
    progress = SimpleNamespace(current=SimpleNamespace(processed=0))
    return SimpleNamespace(
        world_size=world, global_rank=rank, fit_loop=SimpleNamespace(epoch_progress=progress)
    )


def _digits(batch_size: int, scope: str = "global") -> DigitsDataModule:
    return DigitsDataModule(batch_size=batch_size, num_workers=0, batch_scope=scope)


@pytest.mark.parametrize(
    ("batch", "scope", "world", "expected"),
    [(256, "global", 1, 256), (256, "global", 2, 128), (256, "global", 8, 32),
     (256, "device", 8, 256), (6, "global", 3, 2)],
)  # fmt: skip
def test_per_device_batch_divides_a_global_batch(
    batch: int, scope: str, world: int, expected: int
) -> None:
    assert per_device_batch(batch, scope, world) == expected  # type: ignore[arg-type]


def test_a_world_that_does_not_divide_is_refused_in_one_line() -> None:
    dm = _digits(256)
    dm.check_inputs("fit", 4)  # divides
    with pytest.raises(ConfigError) as info:
        dm.check_inputs("fit", 3)
    message = str(info.value)
    assert "\n" not in message
    assert info.value.key == "data.init_args.batch_size"
    for part in ("data.init_args.batch_size=256", "batch_scope: global", "3 processes",
                 "multiple of 3", "255 or 258"):  # fmt: skip
        assert part in message, message
    with pytest.raises(ConfigError, match="multiple of 3"):
        dm.check_inputs("test", 3)  # the evaluation loaders split it too
    _digits(256, "device").check_inputs("fit", 3)  # per-device batches need no division


def test_setup_refuses_too() -> None:
    dm = _digits(10)
    dm.trainer = _fake_trainer(4, 0)
    with pytest.raises(ConfigError, match="multiple of 4"):
        dm.setup("fit")


def test_an_unknown_scope_is_refused() -> None:
    with pytest.raises(ConfigError, match="batch_scope"):
        _digits(8, "node")


def test_too_small_a_split_names_the_global_batch() -> None:
    with pytest.raises(DataError) as info:
        check_train_batches(10, 2, 16, batch_scope="global")
    assert "data.init_args.batch_size=16 with batch_scope: global, 8 per device" in str(info.value)
    check_train_batches(16, 2, 16, batch_scope="global")  # 8 per device: one batch each


def test_every_loader_loads_the_per_device_batch() -> None:
    dm = _digits(8)
    dm.trainer = _fake_trainer(2, 1)
    dm.setup(None)
    assert dm.per_device_batch_size == 4
    for loader in (dm.train_dataloader(), dm.val_dataloader(), dm.test_dataloader(),
                   dm.clean_train_dataloader(1, 2)):  # fmt: skip
        assert loader.batch_size == 4
    views, _ = next(iter(dm.train_dataloader()))
    assert views[0].shape[0] == 4
    # SEPIN's batches keep the configured (global) batch on any number of ranks
    assert dm.view_dataloader("val", 1, 2).batch_size == 8


def _global_batches(world: int, global_batch: int, resumed: int = 0) -> list[set[int]]:
    """The sample indices of each global step of one epoch on ``world`` ranks: the union
    of every rank's batch of that step, drawn by the real training sampler."""
    per_rank = []
    for rank in range(world):
        dm = _digits(global_batch)
        dm.trainer = _fake_trainer(world, rank)
        dm.setup("fit")
        dm.seed, dm.resumed = 7, (0, resumed)
        batches = [[index for index, _ in keys] for keys in dm.train_dataloader().batch_sampler]
        assert all(len(b) == global_batch // world for b in batches)
        per_rank.append(batches)
    steps = min(len(b) for b in per_rank)
    assert all(len(b) == steps for b in per_rank)
    return [set().union(*(b[k] for b in per_rank)) for k in range(steps)]


@pytest.mark.parametrize("world", [1, 2, 4])
def test_global_batch_k_on_w_ranks_is_batch_k_of_one_process(world: int) -> None:
    global_batch = 16
    one = _global_batches(1, global_batch)
    many = _global_batches(world, global_batch)
    full = 1437 // global_batch  # the digits training split: 1,437 images
    assert len(one) == full
    # DistributedSampler pads the epoch to a multiple of the world size: at most one more
    # (padded) final step than one process
    assert full <= len(many) <= full + 1
    for k in range(full):
        assert len(many[k]) == global_batch
        assert many[k] == one[k], k
    # a mid-epoch resume skips the same global batches on every layout
    assert _global_batches(world, global_batch, resumed=5)[:3] == one[5:8]
