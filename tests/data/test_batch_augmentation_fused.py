"""The fused forms of the device views equal their plain references: every view's crop
sampled from the un-repeated source, and the HSV round trip run twice per batch instead of
at each of the four jitter positions."""

from __future__ import annotations

from dataclasses import replace

import torch
from torch import Tensor

from ncl_lightning.data import BatchAugmentation, imagenet_augmentation
from ncl_lightning.data.batch_augmentation import _JitterPlan
from ncl_lightning.data.colour_ops import hue_shift, luma
from ncl_lightning.data.view_params import HUE, ORDER


def _images(n: int, side: int) -> Tensor:
    torch.manual_seed(0)
    smooth = torch.rand(n, 3, side // 8, side // 8)
    up = torch.nn.functional.interpolate(smooth, size=(side, side), mode="bilinear")
    return (255 * (0.7 * up + 0.3 * torch.rand(n, 3, side, side))).round().to(torch.uint8)


def test_views_from_the_unrepeated_source_equal_the_repeated_batch() -> None:
    """``n_views`` views of a batch are the one-view pipeline on the batch repeated
    ``n_views`` times (view-major), with rotation and super-sampling on."""
    aug = BatchAugmentation(replace(imagenet_augmentation(32), rotation=15.0), seed=3)
    images = _images(5, 72)  # 72 > 2 x 32: super-sampled by 2
    packed = aug.draw(images, 3)
    fused = aug.apply_packed(images, packed, 3)
    repeated = aug.apply_packed(images.repeat(3, 1, 1, 1), packed, 1)
    assert fused.shape == (15, 3, 32, 32)
    torch.testing.assert_close(fused, repeated, atol=1e-6, rtol=0)


def _colour_every_position(aug: BatchAugmentation, x: Tensor, packed: Tensor) -> Tensor:
    """Reference jitter: at each of the four positions the blend, then the hue shift of the
    samples whose hue op is at that position."""
    plan = _JitterPlan(packed)
    for i in range(4):
        gray = luma(x)
        other = plan.mean_weight[:, i] * gray.mean((1, 2, 3), True) + plan.gray_weight[:, i] * gray
        x = (other + plan.blend[:, i] * x).clamp(0.0, 1.0)
        x = torch.where(plan.hue_on[:, i], hue_shift(x, plan.hue[:, i]), x)
    return x


def test_two_hue_slots_equal_a_hue_at_every_position() -> None:
    aug = BatchAugmentation(
        replace(imagenet_augmentation(32), jitter_p=1.0, grayscale_p=0.0, blur_p=0.0), seed=5
    )
    images = _images(64, 32)
    packed = aug.draw(images, 1)
    x = images.float() / 255
    hue_at = (packed[:, ORDER] == HUE).float().argmax(dim=1)  # the hue op's position
    assert set(hue_at.tolist()) == {0, 1, 2, 3}  # every position is exercised
    expected = _colour_every_position(aug, x.clone(), packed)
    torch.testing.assert_close(aug._colour(x.clone(), packed), expected, atol=1e-5, rtol=0)
