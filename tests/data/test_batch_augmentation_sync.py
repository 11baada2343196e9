"""The device augmentation only queues work: no host read of a device value, a fixed number
of operators whatever the batch, identities that are exact where an op is off."""

from __future__ import annotations

import pytest
import torch
import torchvision.transforms.v2.functional as TF

from benchmarks.counting import OpCounter
from ncl_lightning.data.batch_augmentation import (
    BatchAugmentation,
    adjust_hue,
    gaussian_blur,
    pack_params,
)
from ncl_lightning.data.transforms import SimCLRAugmentation
from tests.data.augmentation_helpers import rgb_batch

# Every op of the pipeline switched on (solarisation and rotation too).
FULL = SimCLRAugmentation(blur_p=0.5, solarize_p=0.3, rotation=15.0, grayscale_p=0.3)


def _images(n: int, size: int = 32, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n, 3, size, size), generator=generator, dtype=torch.uint8)


@pytest.mark.parametrize("aug", [SimCLRAugmentation(), FULL])
def test_views_make_no_sync_prone_call(aug: SimCLRAugmentation) -> None:
    """Two views of a batch: no ``item``, ``nonzero``, boolean-mask index, ``tolist`` or
    ``.cpu()`` (the reading of the old pipeline: 19 ``nonzero`` and one ``item``)."""
    batch_aug = BatchAugmentation(aug, seed=0)
    images = _images(64)
    batch_aug(images, n_views=2)  # warm-up: the cached constants
    with OpCounter() as count:
        views = batch_aug(images, n_views=2)
    assert [v.shape for v in views] == [(64, 3, 32, 32)] * 2
    assert count.syncs == {}, dict(count.syncs)


def test_operator_count_does_not_grow_with_the_batch() -> None:
    """The ops run on the whole batch: 8 and 256 images dispatch the same operators (the
    old pipeline's count grew with the distinct subsets an op touched)."""
    batch_aug = BatchAugmentation(FULL, seed=0)
    counts = []
    for n in (8, 256):
        images = _images(n)
        batch_aug(images, n_views=2)
        with OpCounter() as count:
            batch_aug(images, n_views=2)
        counts.append(count.ops)
    assert counts[0] == counts[1]
    assert counts[1] < 400  # 775 before the rewrite (2 x 256 CIFAR views)


def test_parameters_reach_the_device_in_one_packed_tensor() -> None:
    """Every per-sample parameter is a column of one float32 ``[B, 18]`` tensor, exactly."""
    params = BatchAugmentation(FULL, seed=3).sample(50, 32, 32)
    packed = pack_params(params)
    assert packed.shape == (50, 18) and packed.dtype == torch.float32
    columns = [
        params.crop,
        params.angle[:, None],
        params.flip[:, None],
        params.jitter[:, None],
        params.factors,
        params.order,
        params.gray[:, None],
        params.blur_sigma[:, None],
        params.solarize[:, None],
    ]
    torch.testing.assert_close(packed, torch.cat([c.float() for c in columns], 1))


def test_blur_with_sigma_zero_is_exactly_the_identity() -> None:
    """Samples that are not blurred go through the convolution with the identity tap and
    come out bit for bit; the others match torchvision's blur."""
    x = rgb_batch(4, 16, seed=5)
    sigma = torch.tensor([0.0, 1.0, 0.0, 2.0])
    out = gaussian_blur(x, sigma, 13)
    assert torch.equal(out[0], x[0]) and torch.equal(out[2], x[2])
    for i in (1, 3):
        ref = TF.gaussian_blur(x[i], [13, 13], [float(sigma[i])] * 2)
        assert (out[i] - ref).abs().max().item() < 1e-5


def test_jitter_that_is_off_changes_nothing() -> None:
    """With jitter, grayscale, blur and solarisation off for a sample, its colour ops are
    exact identities: the output is the geometry alone, normalised."""
    batch_aug = BatchAugmentation(FULL, seed=1)
    images = _images(32, seed=2)
    params = batch_aug.sample(32, 32, 32)
    off = torch.zeros(32, dtype=torch.bool)
    params.jitter, params.gray, params.solarize = off, off, off
    params.blur_sigma = torch.zeros(32)
    out = batch_aug.apply(images, params)
    geometry = batch_aug.geometry(images.float() / 255.0, params)
    ref = (geometry - batch_aug.mean) / batch_aug.std
    assert torch.equal(out, ref)


def test_hue_of_one_channel_is_the_image() -> None:
    """torchvision returns a grayscale image unchanged by ``adjust_hue``; so do we."""
    x = rgb_batch(3, 8, seed=4, channels=1)
    assert torch.equal(adjust_hue(x, torch.tensor([0.1, -0.3, 0.5])), x)


def test_hue_at_ties_and_greys_matches_torchvision() -> None:
    """Pixels whose largest channel ties (R = G, G = B, R = B) or that are grey take the
    same hue as torchvision's branch order gives them."""
    values = [
        [0.8, 0.8, 0.2],
        [0.1, 0.6, 0.6],
        [0.7, 0.3, 0.7],
        [0.5, 0.5, 0.5],
        [0.0, 0.0, 0.0],
        [1.0, 0.0, 0.0],
    ]
    x = torch.tensor(values).T.reshape(1, 3, 2, 3).repeat(5, 1, 1, 1)
    factor = torch.tensor([-0.5, -0.2, 0.0, 0.25, 0.5])
    out = adjust_hue(x, factor)
    ref = torch.stack([TF.adjust_hue(x[i], float(factor[i])) for i in range(5)])
    assert (out - ref).abs().max().item() < 1e-5


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_views_on_a_gpu_never_synchronise() -> None:
    """On a GPU the views run under ``set_sync_debug_mode("error")``: any synchronising
    call (a pageable copy, ``nonzero``, ``item``) would raise."""
    batch_aug = BatchAugmentation(FULL, seed=0).cuda()
    images = _images(256).cuda()
    batch_aug(images, n_views=2)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        views = batch_aug(images, n_views=2)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert views[0].is_cuda and views[0].shape == (256, 3, 32, 32)
