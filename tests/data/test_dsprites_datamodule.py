"""dSprites DataModule: batched renderer, factor-preserving augmentation, batch contract."""

from __future__ import annotations

import pytest
import torch

from ncl_lightning.data import DSpritesDataModule, SpriteAugmentation
from ncl_lightning.data.dsprites import (
    DSPRITES_FACTOR_NAMES,
    DSPRITES_FACTOR_SIZES,
    DSPRITES_NUM_IMAGES,
    index_to_factors,
    render_sprite,
    render_sprites,
)
from ncl_lightning.foundation.errors import ConfigError

SPLITS = ("train", "val", "test")


def random_factors(n: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return index_to_factors(torch.randint(0, DSPRITES_NUM_IMAGES, (n,), generator=g))


def small_dm(**kwargs) -> DSpritesDataModule:
    args = {"train_size": 64, "val_size": 40, "test_size": 24, "batch_size": 16} | kwargs
    dm = DSpritesDataModule(**args)
    dm.setup("fit")
    return dm


# -- batched renderer -------------------------------------------------------------------
def test_batched_renderer_equals_per_image_renderer():
    corners = torch.tensor(
        [[s, sc, o, x, y] for s in range(3) for sc in (0, 5) for o in (0, 7, 39)
         for x in (0, 31) for y in (0, 31)]
    )  # fmt: skip
    factors = torch.cat([random_factors(500), corners])
    batched = render_sprites(factors)
    single = torch.stack([render_sprite(f) for f in factors])
    assert batched.shape == (len(factors), 1, 64, 64) and batched.dtype == torch.float32
    assert torch.equal(batched, single)


def test_batched_renderer_errors():
    with pytest.raises(ValueError, match="factors"):
        render_sprites(torch.zeros(4, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="factors"):
        render_sprites(torch.tensor([[3, 0, 0, 0, 0]]))


# -- augmentation -----------------------------------------------------------------------
def test_augmentation_keeps_range_and_binary_without_blur():
    images = render_sprites(random_factors(64))
    g = torch.Generator().manual_seed(0)
    binary = SpriteAugmentation(blur_prob=0.0)(images, g)
    assert binary.shape == images.shape and set(binary.unique().tolist()) <= {0.0, 1.0}
    blurred = SpriteAugmentation(blur_prob=1.0)(images, g)
    assert blurred.min() >= 0 and blurred.max() <= 1
    assert not torch.equal(blurred, images)


def centre_of_mass(images: torch.Tensor) -> torch.Tensor:
    """(row, column) centre of mass ``[B, 2]`` of images ``[B, 1, H, W]``."""
    grid = torch.arange(images.shape[-1], dtype=torch.float32)
    rows = (images.sum(dim=(1, 3)) * grid).sum(1)
    cols = (images.sum(dim=(1, 2)) * grid).sum(1)
    return torch.stack([rows, cols], dim=1) / images.sum(dim=(1, 2, 3))[:, None]


def test_augmentation_preserves_the_factors():
    """Shifts move every sprite by a whole pixel or less (a position step is 1.5 px) and
    keep it whole; dropout erases at most ~20 % and barely moves the centre of mass."""
    images = render_sprites(random_factors(128, seed=1))
    g = torch.Generator().manual_seed(0)
    shift_only = SpriteAugmentation(max_shift=1, drop_prob=0.0, salt_prob=0.0, blur_prob=0.0)
    shifted = shift_only(images, g)
    moved = centre_of_mass(shifted) - centre_of_mass(images)
    assert torch.allclose(moved, moved.round(), atol=1e-4)
    assert moved.abs().max().item() == pytest.approx(1.0, abs=1e-4)
    assert torch.equal(shifted.sum(dim=(1, 2, 3)), images.sum(dim=(1, 2, 3)))  # nothing cut
    drop_only = SpriteAugmentation(max_shift=0, drop_prob=0.2, salt_prob=0.0, blur_prob=0.0)
    dropped = drop_only(images, g)
    assert (centre_of_mass(dropped) - centre_of_mass(images)).abs().max() < 1.0
    kept = dropped.sum(dim=(1, 2, 3)) / images.sum(dim=(1, 2, 3))
    assert kept.min() > 0.65 and (dropped <= images).all()


def test_augmentation_off_is_identity_and_generator_reproduces():
    images = render_sprites(random_factors(16))
    off = SpriteAugmentation(max_shift=0, drop_prob=0.0, salt_prob=0.0, blur_prob=0.0)
    assert torch.equal(off(images), images)
    aug = SpriteAugmentation()
    a = aug(images, torch.Generator().manual_seed(3))
    b = aug(images, torch.Generator().manual_seed(3))
    assert torch.equal(a, b)


@pytest.mark.parametrize(
    ("field", "value"),
    [("max_shift", -1), ("max_shift", 9), ("drop_prob", 1.0), ("salt_prob", -0.1),
     ("blur_prob", 1.5), ("blur_sigma", (1.0, 0.5)), ("blur_sigma", (0.0, 1.0))],
)  # fmt: skip
def test_augmentation_bad_fields_raise(field, value):
    with pytest.raises(ConfigError, match=f"^{field} must be") as error:
        SpriteAugmentation(**{field: value})
    assert "\n" not in str(error.value) and error.value.key == field


# -- DataModule -------------------------------------------------------------------------
def test_batch_contract():
    dm = small_dm()
    assert dm.num_classes == 0 and dm.in_channels == 1 and dm.image_size == 64
    assert dm.factor_names == DSPRITES_FACTOR_NAMES and dm.factor_sizes == DSPRITES_FACTOR_SIZES
    views, factors = next(iter(dm.train_dataloader()))
    assert isinstance(views, list) and len(views) == 2
    for v in views:
        assert v.shape == (16, 1, 64, 64) and v.dtype == torch.float32
        assert v.min() >= 0 and v.max() <= 1
    assert factors.shape == (16, 5) and factors.dtype == torch.long
    assert not torch.equal(views[0], views[1]), "two views of the same sprites are identical"
    assert len(dm.train_dataloader()) == 64 // 16

    images, factors = next(iter(dm.val_dataloader()))
    assert images.shape == (16, 1, 64, 64) and factors.shape == (16, 5)
    assert torch.equal(images, render_sprites(factors))  # clean
    assert sum(len(f) for _, f in dm.test_dataloader()) == 24  # no batch dropped


def test_splits_disjoint_and_seeded():
    dm = DSpritesDataModule(train_size=500, val_size=300, test_size=200, batch_size=10)
    parts = [dm.train_indices, dm.val_indices, dm.test_indices]
    assert [len(p) for p in parts] == [500, 300, 200]
    assert len(torch.cat(parts).unique()) == 1000
    again = DSpritesDataModule(train_size=500, val_size=300, test_size=200, batch_size=10)
    assert torch.equal(torch.cat(parts), torch.cat([again.split_indices(s) for s in SPLITS]))
    other = DSpritesDataModule(train_size=500, val_size=300, test_size=200, seed=1)
    assert not torch.equal(other.val_indices, dm.val_indices)


def test_seed_reproduces_training_batches_and_epochs_differ():
    first = [v[0] for v, _ in small_dm(seed=5).train_dataloader()]
    dm = small_dm(seed=5)
    epoch_1 = [v[0] for v, _ in dm.train_dataloader()]
    dm.resumed = (1, 0)  # what a run resumed at the start of epoch 1 loads
    epoch_2 = [v[0] for v, _ in dm.train_dataloader()]
    assert all(torch.equal(a, b) for a, b in zip(first, epoch_1, strict=True))
    assert not torch.equal(epoch_1[0], epoch_2[0])
    other = [v[0] for v, _ in small_dm(seed=6).train_dataloader()]
    assert not torch.equal(first[0], other[0])


def test_batches_of_a_batch_differ_and_do_not_depend_on_the_global_generator():
    collate = small_dm().train_dataloader().collate_fn
    keys = [(i, 1000 + i) for i in range(8)]
    state = torch.get_rng_state()
    (a, _), (b, _) = collate(keys), collate(keys)
    assert torch.equal(torch.get_rng_state(), state)  # the global stream is untouched
    assert torch.equal(a[0], b[0]) and not torch.equal(a[0], a[1])
    (c, _) = collate([(i, 2000 + i) for i in range(8)])
    assert not torch.equal(a[0], c[0])  # other sample seeds, other views


@pytest.mark.parametrize("workers", [0, 2])
def test_workers_give_the_batches_of_the_main_process(workers):
    main = [v[0] for v, _ in small_dm(seed=2).train_dataloader()]
    run = [v[0] for v, _ in small_dm(num_workers=workers, seed=2).train_dataloader()]
    assert len(run) == 4
    assert all(torch.equal(a, b) for a, b in zip(main, run, strict=True))


def test_clean_and_view_dataloaders_shard_and_repeat():
    dm = DSpritesDataModule(train_size=64, val_size=40, test_size=24, batch_size=16)
    shards = [torch.cat([f for _, f in dm.clean_dataloader("val", r, 2)]) for r in (0, 1)]
    assert sum(len(s) for s in shards) == 40
    full = torch.cat([f for _, f in dm.clean_dataloader("val")])
    assert torch.equal(full[0::2], shards[0]) and torch.equal(full[1::2], shards[1])
    a, b = (next(iter(dm.view_dataloader("val")))[0] for _ in range(2))
    assert torch.equal(a[0], b[0]) and not torch.equal(a[0], a[1])
    # View batches: a seeded order of the split cut into batches (the incomplete last one
    # dropped); rank r of 2 gets batches r::2 with the same views and factors.
    whole = list(dm.view_dataloader("val"))
    assert len(whole) == 40 // 16
    assert not torch.equal(whole[0][1], full[:16]), "the view batches are not shuffled"
    for rank in (0, 1):
        for (views, factors), (ref_views, ref_factors) in zip(
            dm.view_dataloader("val", rank, 2), whole[rank::2], strict=True
        ):
            assert torch.equal(factors, ref_factors) and torch.equal(views[0], ref_views[0])
    with pytest.raises(ValueError, match="split"):
        dm.clean_dataloader("holdout")


def test_factor_jitter_views_are_factor_neighbours():
    dm = small_dm(augmentation=SpriteAugmentation(0, 0.0, 0.0, 0.0), factor_jitter=1)
    collate = dm.train_dataloader().collate_fn
    factors = index_to_factors(dm.train_indices)
    moved = collate.jitter(factors, torch.Generator().manual_seed(0))
    step = moved - factors
    assert torch.equal(moved[:, 0], factors[:, 0])  # shape is never changed
    assert (step[:, [1, 3, 4]].abs() <= 1).all()
    assert ((step[:, 2] % 40 == 0) | (step[:, 2] % 40 == 1) | (step[:, 2] % 40 == 39)).all()
    assert (moved >= 0).all() and (moved < torch.tensor(DSPRITES_FACTOR_SIZES)).all()
    # With no pixel augmentation, each view is exactly the render of its moved factors.
    views, labels = collate([(i, i) for i in range(16)])
    assert torch.equal(labels, factors[:16]) and not torch.equal(views[0], views[1])
    assert set(views[0].unique().tolist()) <= {0.0, 1.0}


@pytest.mark.parametrize(
    ("kwargs", "culprit"),
    [({"train_size": 0}, "train_size"), ({"val_size": 0}, "val_size"),
     ({"batch_size": 0}, "batch_size"), ({"num_workers": -1}, "num_workers"),
     ({"n_views": 0}, "n_views"), ({"seed": -1}, "seed"),
     ({"factor_jitter": -1}, "factor_jitter"),
     ({"train_size": 10, "batch_size": 16}, "batch_size"),
     ({"train_size": DSPRITES_NUM_IMAGES}, "train_size \\+ val_size")],
)  # fmt: skip
def test_bad_arguments_raise_one_line(kwargs, culprit):
    with pytest.raises(ValueError, match=culprit) as error:
        DSpritesDataModule(**kwargs)
    assert "\n" not in str(error.value)
