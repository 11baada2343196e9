"""ImageFolderDataModule and ImageNet100DataModule on tiny folders and the real subset."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from ncl_lightning.data import (
    ImageFolderDataModule,
    ImageNet100DataModule,
    SimCLRAugmentation,
    load_imagenet100_classes,
)
from tests.fakes import make_image_folder, write_images

EXTRA_WNIDS = ("n00000001", "n99999999")  # not in ImageNet-100: must be ignored


@pytest.fixture(scope="module")
def imagenet_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A full-ImageNet-like tree: the 100 subset WNIDs plus two other classes."""
    wnids = load_imagenet100_classes() + list(EXTRA_WNIDS)
    return make_image_folder(tmp_path_factory.mktemp("imagenet"), wnids, n=1)


def test_imagenet100_selects_the_subset(
    imagenet_root: Path, monkeypatch: pytest.MonkeyPatch, check_batches: Callable[..., None]
) -> None:
    walked: list[str] = []
    real_walk = os.walk

    def spy_walk(top: str, *args: object, **kwargs: object):
        walked.append(Path(top).name)
        return real_walk(top, *args, **kwargs)

    monkeypatch.setattr(os, "walk", spy_walk)
    dm = ImageNet100DataModule(root=str(imagenet_root), batch_size=8, num_workers=0)
    assert (dm.num_classes, dm.in_channels, dm.image_size) == (100, 3, 224)
    dm.setup("fit")
    assert dm.classes == sorted(dm.classes) and len(dm.classes) == 100
    assert not set(EXTRA_WNIDS) & set(walked), "scanned folders outside the subset"
    assert len(dm.train_dataset) == 100 and len(dm.val_dataset) == 100
    assert sorted(dm.base_dataset("train").targets) == list(range(100))
    check_batches(dm)
    images, _ = next(iter(dm.val_dataloader()))
    assert images.shape == (8, 3, 224, 224)


def test_imagenet100_class_list_and_missing_class(tmp_path: Path) -> None:
    root = make_image_folder(tmp_path / "in", ["n02", "n01"], n=2)
    (tmp_path / "classes.txt").write_text("n02\nn01  # a comment\n\nn03\n")
    dm = ImageNet100DataModule(root=str(root), class_list=str(tmp_path / "classes.txt"))
    assert dm.classes == ["n01", "n02", "n03"] and dm.num_classes == 3
    with pytest.raises(
        FileNotFoundError, match=r"class folder\(s\) missing under .*in/train: n03 \(1 of 3"
    ):
        dm.setup("fit")
    with pytest.raises(FileNotFoundError, match=r"class_list file not found"):
        ImageNet100DataModule(root=str(root), class_list=str(tmp_path / "absent.txt"))


def test_imagenet100_missing_split_folder(tmp_path: Path) -> None:
    dm = ImageNet100DataModule(root=str(tmp_path))
    with pytest.raises(FileNotFoundError, match=r"ImageNet-100 train folder not found: .*train"):
        dm.setup("fit")


def test_image_folder_batches_and_test_fallback(
    tmp_path: Path, check_batches: Callable[..., None]
) -> None:
    root = make_image_folder(tmp_path, ["cat", "ant", "bee"], n=4)
    dm = ImageFolderDataModule(root=str(root), image_size=16, batch_size=4, num_workers=0)
    assert (dm.num_classes, dm.classes, dm.image_size) == (3, ["ant", "bee", "cat"], 16)
    dm.setup("fit")
    check_batches(dm)
    dm.setup("test")
    assert dm.base_dataset("test") is dm.base_dataset("val")
    assert len(dm.test_dataset) == 12


def test_clean_val_batches_are_deterministic(tmp_path: Path) -> None:
    root = make_image_folder(tmp_path, ["a", "b"], n=3)
    dm = ImageFolderDataModule(root=str(root), image_size=8, batch_size=2, num_workers=0)
    dm.setup("fit")
    first = [b for b, _ in dm.val_dataloader()]
    second = [b for b, _ in dm.val_dataloader()]
    assert all(torch.equal(x, y) for x, y in zip(first, second, strict=True))
    assert [len(b) for b in first] == [2, 2, 2]  # in order, nothing dropped
    clean, labels = next(iter(dm.clean_train_dataloader()))
    assert clean.shape == (2, 3, 8, 8) and labels.tolist() == [0, 0]


def test_image_folder_errors(tmp_path: Path) -> None:
    with pytest.raises(
        FileNotFoundError, match=r"init_args.root: data folder not found: .*missing"
    ):
        ImageFolderDataModule(root=str(tmp_path / "missing"))

    root = make_image_folder(tmp_path / "empty", ["a", "b"], n=2)
    for f in (root / "val" / "b").iterdir():
        f.unlink()
    dm = ImageFolderDataModule(root=str(root), image_size=8, batch_size=2, num_workers=0)
    with pytest.raises(FileNotFoundError, match=r"empty class folder: .*val/b \(no files"):
        dm.setup("fit")

    root = make_image_folder(tmp_path / "noval", ["a", "b"], n=2, splits=("train",))
    write_images(root / "val" / "a", 1)
    dm = ImageFolderDataModule(root=str(root), image_size=8, batch_size=2, num_workers=0)
    with pytest.raises(FileNotFoundError, match=r"class folder\(s\) missing under .*noval/val: b "):
        dm.setup("fit")


def test_too_few_samples_names_batch_size(tmp_path: Path) -> None:
    root = make_image_folder(tmp_path, ["a", "b"], n=2)
    dm = ImageFolderDataModule(root=str(root), image_size=8, batch_size=8, num_workers=0)
    with pytest.raises(ValueError, match=r"has 4 samples.*batch_size=8"):
        dm.setup("fit")


def test_augmentation_must_match_images(tmp_path: Path) -> None:
    root = make_image_folder(tmp_path, ["a", "b"], n=2)
    aug = SimCLRAugmentation(crop_size=16)
    dm = ImageFolderDataModule(root=str(root), image_size=8, augmentation=aug, num_workers=0)
    with pytest.raises(ValueError, match=r"crop_size=16 differs .* image_size=8"):
        dm.setup("fit")


def test_real_cifar_subset(cifar_subset: Path, check_batches: Callable[..., None]) -> None:
    dm = ImageFolderDataModule(root=str(cifar_subset), batch_size=64, num_workers=0)
    assert dm.num_classes == 10 and dm.classes[0] == "airplane" and dm.classes[-1] == "truck"
    dm.setup("fit")
    assert len(dm.train_dataset) == 3728 and len(dm.val_dataset) == 932
    check_batches(dm)
    images, _ = next(iter(dm.val_dataloader()))
    # Clean CIFAR images normalised with CIFAR statistics: roughly zero mean, unit std.
    assert images.mean().abs() < 0.5 and 0.5 < images.std() < 1.5
