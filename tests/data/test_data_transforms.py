"""SimCLRAugmentation validation, presets, the clean transform and MultiView."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from jsonargparse import ArgumentParser
from PIL import Image

from ncl_lightning.data import (
    AUGMENTATIONS,
    IMAGENET_MEAN,
    DigitsDataModule,
    MultiView,
    MultiViewDataModule,
    SimCLRAugmentation,
    cifar_augmentation,
    digits_augmentation,
    imagenet_augmentation,
    scaled_augmentation,
)
from ncl_lightning.data.transforms import blur_kernel_size


def _pil(size: tuple[int, int] = (40, 36), seed: int = 0) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8))


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("crop_size", 0, r"crop_size must be an integer >= 1, got 0"),
        ("crop_scale", (0.5, 0.2), r"crop_scale must be \(min, max\)"),
        ("crop_scale", (0.0, 1.0), r"crop_scale"),
        ("crop_scale", (0.2, 1.5), r"crop_scale"),
        ("crop_ratio", (2.0, 1.0), r"crop_ratio"),
        ("blur_sigma", (0.0, 1.0), r"blur_sigma"),
        ("jitter_p", 1.2, r"jitter_p must be in \[0, 1\]"),
        ("grayscale_p", -0.1, r"grayscale_p must be in \[0, 1\]"),
        ("blur_p", 2.0, r"blur_p"),
        ("solarize_p", -1.0, r"solarize_p"),
        ("flip_p", 1.5, r"flip_p"),
        ("hue", 0.7, r"hue must be in \[0, 0.5\]"),
        ("brightness", -0.1, r"brightness must be >= 0"),
        ("rotation", -5.0, r"rotation must be >= 0"),
        ("std", (0.2, 0.2), r"mean and std must have the same"),
        ("std", (0.2, 0.0, 0.2), r"std must be > 0"),
    ],
)
def test_bad_field_names_the_field(field: str, value: object, match: str) -> None:
    with pytest.raises(ValueError, match=match) as info:
        SimCLRAugmentation(**{field: value})
    assert "\n" not in str(info.value) and info.value.key == field


def test_rgb_only_fields_rejected_on_one_channel() -> None:
    with pytest.raises(ValueError, match=r"saturation needs RGB"):
        SimCLRAugmentation(mean=(0.5,), std=(0.5,))


def test_lists_become_tuples() -> None:
    aug = SimCLRAugmentation(crop_scale=[0.2, 1.0], mean=[0.5, 0.5, 0.5], std=[0.2, 0.2, 0.2])
    assert aug.crop_scale == (0.2, 1.0) and isinstance(aug.mean, tuple)


def test_presets_by_name() -> None:
    assert AUGMENTATIONS.names == ["cifar", "cifar100", "digits", "imagenet"]
    assert AUGMENTATIONS.build("cifar") == cifar_augmentation()
    cifar = cifar_augmentation()
    # The releases' scripts/pretrain/cifar/augmentations/symmetric.yaml: blur p 0.5, σ 0.1-2.
    assert (cifar.crop_size, cifar.crop_scale, cifar.jitter_p) == (32, (0.08, 1.0), 0.8)
    assert (cifar.blur_p, cifar.blur_sigma, cifar.blur_kernel_side) == (0.5, (0.1, 2.0), 13)
    assert SimCLRAugmentation() == cifar  # a config setting some fields keeps the recipe
    assert (cifar.brightness, cifar.contrast, cifar.saturation, cifar.hue) == (0.8, 0.8, 0.8, 0.2)
    imagenet = imagenet_augmentation()
    assert (imagenet.crop_size, imagenet.blur_p, imagenet.blur_kernel_side) == (224, 0.5, 23)
    digits = digits_augmentation()
    assert (digits.flip_p, digits.channels, digits.crop_size) == (0.0, 1, 8)
    assert scaled_augmentation(64).crop_size == 64 and scaled_augmentation(64).blur_p == 0.5
    assert scaled_augmentation(96).blur_p == 0.5
    # The CIFAR blur's 13-px kernel needs 7 px; smaller images get no blur.
    assert scaled_augmentation(7).blur_p == 0.5 and scaled_augmentation(6).blur_p == 0.0


def test_blur_kernel_size_rule() -> None:
    """±3 σ_max, odd, never below SimCLR's ~10 % of the side (23 px at 224) or 3."""
    assert [blur_kernel_size(s, 32) for s in (0.1, 0.5, 1.0, 2.0)] == [3, 5, 7, 13]
    assert [blur_kernel_size(2.0, side) for side in (8, 64, 160, 224)] == [13, 13, 17, 23]
    assert SimCLRAugmentation(blur_p=0.5, blur_kernel=3).blur_kernel_side == 3


@pytest.mark.parametrize(
    ("fields", "key", "match"),
    [
        ({"crop_size": 6, "blur_p": 0.5}, "blur_sigma", r"13-px blur kernel .* crop_size=6"),
        ({"crop_size": 4, "blur_p": 0.5, "blur_kernel": 9}, "blur_kernel", r"crop_size=4"),
        ({"blur_kernel": 4}, "blur_kernel", r"blur_kernel must be odd"),
        ({"blur_kernel": 0}, "blur_kernel", r"blur_kernel must be an integer >= 1, got 0"),
        ({"blur_sigma": (0.1, float("inf"))}, "blur_sigma", r"blur_sigma must be a finite"),
    ],
)
def test_blur_kernel_that_does_not_fit_is_refused(fields: dict, key: str, match: str) -> None:
    """A blur kernel the crop cannot hold (reflect padding) fails at config time."""
    with pytest.raises(ValueError, match=match) as info:
        SimCLRAugmentation(**fields)
    assert info.value.key == key
    SimCLRAugmentation(crop_size=6, blur_p=0.0)  # no blur: no kernel to fit
    SimCLRAugmentation(crop_size=7, blur_p=0.5)


@pytest.mark.parametrize(
    "aug",
    [
        cifar_augmentation(),
        imagenet_augmentation(crop_size=48),
        SimCLRAugmentation(blur_p=1.0, solarize_p=1.0, rotation=15.0),
    ],
)
@pytest.mark.parametrize("kind", ["pil", "uint8", "float"])
def test_build_accepts_pil_and_tensors(aug: SimCLRAugmentation, kind: str) -> None:
    img = _pil()
    if kind != "pil":
        img = torch.from_numpy(np.array(img)).permute(2, 0, 1).contiguous()
        img = img if kind == "uint8" else img.float() / 255
    out = aug.build()(img)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32
    assert out.shape == (3, aug.crop_size, aug.crop_size)
    assert torch.isfinite(out).all()


def test_digits_views_on_float_tensors() -> None:
    img = torch.rand(1, 8, 8)
    views = MultiView(digits_augmentation().build(), n_views=3)(img)
    assert len(views) == 3 and all(v.shape == (1, 8, 8) for v in views)
    assert not torch.equal(views[0], views[1])


def test_multiview_draws_are_independent() -> None:
    torch.manual_seed(0)
    views = MultiView(cifar_augmentation().build(), n_views=4)(_pil())
    assert len(views) == 4
    for i in range(4):
        for j in range(i + 1, 4):
            assert not torch.equal(views[i], views[j])
    with pytest.raises(ValueError, match="n_views"):
        MultiView(lambda x: x, n_views=0)


def test_clean_is_deterministic_and_normalised() -> None:
    aug = cifar_augmentation()
    img = _pil((32, 32))
    clean = aug.clean()
    a, b = clean(img), clean(img)
    assert torch.equal(a, b) and a.shape == (3, 32, 32)
    raw = torch.from_numpy(np.array(img)).permute(2, 0, 1).float() / 255
    expected = (raw - torch.tensor(aug.mean)[:, None, None]) / torch.tensor(aug.std)[:, None, None]
    torch.testing.assert_close(a, expected)
    big = imagenet_augmentation().clean(resize=256)(_pil((300, 400)))
    assert big.shape == (3, 224, 224)


def test_jsonargparse_round_trip() -> None:
    """The dataclass fields become config keys; the subclass is chosen by name."""
    parser = ArgumentParser(exit_on_error=False)
    parser.add_subclass_arguments(MultiViewDataModule, "data")
    cfg = parser.parse_args(
        [
            "--data=DigitsDataModule",
            "--data.init_args.batch_size=32",
            '--data.init_args.augmentation={"crop_size": 8, "rotation": 5, "saturation": 0,'
            ' "hue": 0, "grayscale_p": 0, "mean": [0.3], "std": [0.4]}',
        ]
    )
    dm = parser.instantiate_classes(cfg).data
    assert isinstance(dm, DigitsDataModule) and dm.batch_size == 32
    assert dm.augmentation.rotation == 5.0 and dm.augmentation.mean == (0.3,)


def test_crop_flip_keeps_geometry_and_drops_photometric_ops() -> None:
    aug = imagenet_augmentation().crop_flip()
    names = [type(op).__name__ for op in aug.build().transforms]
    assert "RandomResizedCrop" in names and "RandomHorizontalFlip" in names
    assert not {"RandomApply", "RandomGrayscale", "RandomSolarize"} & set(names)
    assert aug.crop_scale == imagenet_augmentation().crop_scale and aug.mean == IMAGENET_MEAN
