"""ImageNetOODDataModule on tiny Stylized / Sketch / ImageNet-C folders."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from ncl_lightning.data import load_imagenet100_classes
from ncl_lightning.data.ood import IMAGENET_C_CORRUPTIONS, ImageNetOODDataModule
from tests.fakes import write_images

OUTSIDE = "n99999999"  # not in ImageNet-100: never scanned, never in a batch
CORRUPTIONS = ["snow", "gaussian_noise"]  # not alphabetical: the given order is kept
SEVERITIES = [3, 1]  # evaluated ascending
NAMES = [
    "stylized",
    "sketch",
    "imagenet_c/snow/1",
    "imagenet_c/snow/3",
    "imagenet_c/gaussian_noise/1",
    "imagenet_c/gaussian_noise/3",
]


def make_ood_tree(root: Path, wnids: list[str]) -> dict[str, str]:
    """Stylized, Sketch and ImageNet-C (2 corruptions x severities 1, 3) folders of
    ``wnids`` plus ``OUTSIDE``; returns the datamodule root arguments."""
    for c, wnid in enumerate([*wnids, OUTSIDE]):
        write_images(root / "stylized" / wnid, 2, size=(20, 12), seed=c)
        write_images(root / "sketch" / wnid, 1, size=(9, 16), seed=50 + c)
        for corruption in CORRUPTIONS:
            for severity in (1, 3):
                folder = root / "imagenet_c" / corruption / str(severity) / wnid
                write_images(folder, 1, size=(224, 224), seed=100 + c)
    return {
        "stylized_root": str(root / "stylized"),
        "sketch_root": str(root / "sketch"),
        "imagenet_c_root": str(root / "imagenet_c"),
    }


@pytest.fixture(scope="module")
def wnids() -> list[str]:
    """Three ImageNet-100 WNIDs, deliberately unsorted."""
    classes = load_imagenet100_classes()
    return [classes[42], classes[0], classes[7]]


@pytest.fixture(scope="module")
def ood_tree(tmp_path_factory: pytest.TempPathFactory, wnids: list[str]) -> dict[str, str]:
    root = tmp_path_factory.mktemp("ood")
    (root / "classes.txt").write_text("\n".join(wnids) + "\n")
    return {**make_ood_tree(root, wnids), "class_list": str(root / "classes.txt")}


def ood_module(tree: dict[str, str], **kwargs: object) -> ImageNetOODDataModule:
    args = {"corruptions": CORRUPTIONS, "severities": SEVERITIES, "batch_size": 4}
    return ImageNetOODDataModule(**{**tree, "num_workers": 0, **args, **kwargs})  # type: ignore[arg-type]


def test_sets_names_labels_and_batches(
    ood_tree: dict[str, str], wnids: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    walked: list[str] = []
    real_walk = os.walk

    def spy_walk(top: str, *args: object, **kwargs: object):
        walked.append(Path(top).name)
        return real_walk(top, *args, **kwargs)

    monkeypatch.setattr(os, "walk", spy_walk)
    dm = ood_module(ood_tree)
    assert (dm.num_classes, dm.in_channels, dm.image_size) == (3, 3, 224)
    assert dm.classes == sorted(wnids) and dm.test_names == NAMES
    dm.setup("test")
    assert OUTSIDE not in walked, "scanned a class folder outside the class list"
    loaders = dm.test_dataloader()
    assert len(loaders) == len(NAMES) and len(dm.predict_dataloader()) == len(NAMES)
    per_wnid = {"stylized": 2}
    for name, loader in zip(NAMES, loaders, strict=True):
        dataset = loader.dataset
        n = per_wnid.get(name, 1)
        assert len(dataset) == 3 * n, name
        assert [label for _, label in dataset.dataset.samples] == [0] * n + [1] * n + [2] * n
        assert not any(OUTSIDE in path for path, _ in dataset.dataset.samples)
        images, labels = next(iter(loader))
        assert images.shape == (min(4, 3 * n), 3, 224, 224) and images.dtype == torch.float32
        assert labels.dtype == torch.long
    # Labels follow the sorted list: the first sample of label 0 lies in the smallest WNID.
    assert sorted(wnids)[0] in loaders[0].dataset.dataset.samples[0][0]
    # ImageNet-C images are 224 x 224 already: the transform only normalises them.
    clean = dm.augmentation.clean(resize=None)
    image, _ = loaders[2].dataset.dataset[0]
    assert torch.equal(loaders[2].dataset[0][0], clean(image))


def test_default_list_labels_are_imagenet100_positions(tmp_path: Path) -> None:
    classes = load_imagenet100_classes()
    for c, wnid in enumerate([*classes, OUTSIDE]):
        write_images(tmp_path / wnid, 1, size=(8, 8), seed=c)
    dm = ImageNetOODDataModule(sketch_root=str(tmp_path), batch_size=50, num_workers=0)
    assert dm.num_classes == 100 and dm.test_names == ["sketch"]
    dm.setup()
    samples = dm.test_datasets[0].dataset.samples
    assert len(samples) == 100
    assert all(classes[label] == Path(path).parent.name for path, label in samples)
    images, labels = next(iter(dm.test_dataloader()[0]))
    assert images.shape == (50, 3, 224, 224) and labels.tolist() == list(range(50))


def test_default_corruptions_and_names_without_disk(tmp_path: Path) -> None:
    dm = ImageNetOODDataModule(imagenet_c_root=str(tmp_path / "absent"), severities=[2])
    assert dm.corruptions == list(IMAGENET_C_CORRUPTIONS) and len(dm.corruptions) == 15
    assert dm.test_names == [f"imagenet_c/{c}/2" for c in IMAGENET_C_CORRUPTIONS]
    with pytest.raises(FileNotFoundError, match=r"ImageNet-C folder not found: .*absent"):
        dm.setup("test")


def test_missing_folders(ood_tree: dict[str, str], tmp_path: Path) -> None:
    dm = ImageNetOODDataModule(stylized_root=str(tmp_path / "nope"), class_list=None)
    with pytest.raises(FileNotFoundError, match=r"Stylized-ImageNet folder not found: .*nope"):
        dm.setup("test")
    classes = tmp_path / "classes.txt"
    classes.write_text(Path(ood_tree["class_list"]).read_text() + "n01930112\n")
    dm = ood_module(ood_tree, class_list=str(classes))
    with pytest.raises(
        FileNotFoundError, match=r"class folder\(s\) missing under .*stylized: n01930112 "
    ):
        dm.setup("test")
    tree = {"imagenet_c_root": ood_tree["imagenet_c_root"], "class_list": ood_tree["class_list"]}
    with pytest.raises(FileNotFoundError, match=r"ImageNet-C fog folder not found: .*fog"):
        ood_module(tree, corruptions=["snow", "fog"]).setup("test")
    with pytest.raises(FileNotFoundError, match=r"ImageNet-C snow severity 5 folder not found"):
        ood_module(tree, severities=[1, 5]).setup("test")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"corruptions": ["rain"]}, r"corruptions must be .*'gaussian_noise'.*got \['rain'\]"),
        ({"corruptions": ["fog", "fog"]}, r"corruptions must be distinct"),
        ({"severities": [0, 3]}, r"severities must be .*\[1, 2, 3, 4, 5\], got \[0, 3\]"),
        ({"severities": [6]}, r"severities must be"),
        ({"severities": []}, r"severities must be"),
    ],
)
def test_bad_corruptions_and_severities(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ImageNetOODDataModule(imagenet_c_root="/nowhere", **kwargs)


def test_no_root_and_test_only(ood_tree: dict[str, str]) -> None:
    with pytest.raises(ValueError, match=r"at least one of stylized_root, sketch_root"):
        ImageNetOODDataModule(class_list=ood_tree["class_list"])
    dm = ood_module(ood_tree)
    for stage in ("fit", "validate"):
        with pytest.raises(ValueError, match=rf"test-only \(stage '{stage}'.*ncl-cli test"):
            dm.setup(stage)
    with pytest.raises(ValueError, match=r"test-only"):
        dm.train_dataloader()
    with pytest.raises(RuntimeError, match=r"call setup\('test'\) first"):
        dm.test_dataloader()
