"""SimCLR's views of dSprites (the NCL paper's setting, App. F.1) against obvious references."""

from __future__ import annotations

import pytest
import torch

from ncl_lightning.data import DSpritesDataModule, SimCLRSpriteViews, sprite_simclr_augmentation
from ncl_lightning.data.dsprites import index_to_factors, render_sprites
from ncl_lightning.foundation.errors import ConfigError

# No randomness left: the whole image as the crop, nothing else.
STILL = {"crop_scale": (1.0, 1.0), "crop_ratio": (1.0, 1.0), "flip_p": 0.0,
         "jitter_p": 0.0, "blur_p": 0.0}  # fmt: skip


def sprites(n: int = 16, seed: int = 0) -> torch.Tensor:
    """``n`` rendered sprites ``[n, 1, 64, 64]`` at random grid points."""
    g = torch.Generator().manual_seed(seed)
    return render_sprites(index_to_factors(torch.randint(0, 737_280, (n,), generator=g)))


def centroid_x(images: torch.Tensor) -> torch.Tensor:
    """Horizontal centre of mass ``[B]`` in pixels (NaN for an empty image)."""
    mass = images.sum((1, 2, 3))
    columns = torch.arange(images.shape[-1], dtype=images.dtype) + 0.5
    return (images.sum((1, 2)) * columns).sum(-1) / mass


def test_recipe_is_simclr_on_one_channel():
    aug = sprite_simclr_augmentation()
    assert (aug.crop_size, aug.crop_scale, aug.flip_p) == (64, (0.08, 1.0), 0.5)
    assert (aug.brightness, aug.contrast, aug.jitter_p) == (0.8, 0.8, 0.8)
    assert (aug.blur_p, aug.blur_sigma) == (0.5, (0.1, 2.0))
    assert (aug.saturation, aug.hue, aug.grayscale_p, aug.solarize_p) == (0, 0, 0, 0)
    assert aug.channels == 1 and aug.mean == (0.0,) and aug.std == (1.0,)


def test_still_recipe_is_the_identity():
    x = sprites()
    out = SimCLRSpriteViews(sprite_simclr_augmentation(**STILL))(x, torch.Generator())
    torch.testing.assert_close(out, x, atol=1e-5, rtol=0)


def test_flip_only_recipe_mirrors_every_sprite():
    x = sprites()
    views = SimCLRSpriteViews(sprite_simclr_augmentation(**{**STILL, "flip_p": 1.0}))
    out = views(x, torch.Generator())
    torch.testing.assert_close(out, torch.flip(x, dims=[-1]), atol=1e-5, rtol=0)


def test_views_are_in_range_reproducible_and_per_sample():
    x = sprites(64)
    views = SimCLRSpriteViews(sprite_simclr_augmentation())
    a = views(x, torch.Generator().manual_seed(1))
    b = views(x, torch.Generator().manual_seed(1))
    c = views(x, torch.Generator().manual_seed(2))
    assert a.shape == x.shape and a.dtype == torch.float32
    assert a.min() >= 0.0 and a.max() <= 1.0
    assert torch.equal(a, b) and not torch.equal(a, c)
    # One sprite 8 times, whole-image crops (a small crop can miss the sprite: an empty
    # view): the jitter factors differ per sample, so do the 8 views.
    whole = SimCLRSpriteViews(sprite_simclr_augmentation(crop_scale=(1.0, 1.0), jitter_p=1.0))
    out = whole(sprites(1).expand(8, -1, -1, -1), torch.Generator().manual_seed(3))
    assert len({tuple(v.flatten().tolist()) for v in out}) == 8


def test_views_move_the_position_factor_unlike_the_pixel_noise():
    """Crops and flips move a sprite's centre by many pixels; SpriteAugmentation by <= 1."""
    x = sprites(256)
    out = SimCLRSpriteViews(sprite_simclr_augmentation())(x, torch.Generator().manual_seed(0))
    moved = (centroid_x(out) - centroid_x(x)).abs()
    moved = moved[~moved.isnan()]  # crops that miss the sprite are empty
    assert moved.numel() > 64
    assert moved.median() > 3.0  # one posX step is 48/31 ~ 1.5 px


@pytest.mark.parametrize(
    ("overrides", "culprit"),
    [({"mean": (0.5, 0.5, 0.5), "std": (0.5, 0.5, 0.5)}, "augmentation.mean"),
     ({"crop_size": 32}, "augmentation.crop_size")],
)  # fmt: skip
def test_wrong_recipe_is_refused_by_the_datamodule(overrides, culprit):
    aug = sprite_simclr_augmentation(**overrides)
    with pytest.raises(ConfigError) as info:
        DSpritesDataModule(train_size=64, val_size=32, batch_size=16, augmentation=aug)
    message = str(info.value)
    assert culprit in message and "\n" not in message


def test_datamodule_batches_are_simclr_views_of_the_batch_sprites():
    aug = sprite_simclr_augmentation(**{**STILL, "flip_p": 1.0})
    dm = DSpritesDataModule(train_size=64, val_size=32, batch_size=16, augmentation=aug)
    views, factors = next(iter(dm.train_dataloader()))
    assert len(views) == 2 and views[0].shape == (16, 1, 64, 64)
    mirrored = torch.flip(render_sprites(factors), dims=[-1])
    torch.testing.assert_close(views[0], mirrored, atol=1e-5, rtol=0)
