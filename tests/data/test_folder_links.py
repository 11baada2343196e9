"""Directory links in image folders: never followed back into the dataset, followed once
outside it, and counted in one warning per split.

Regression: with ``train/airplane/up -> ..`` a scan that followed links listed the tree
again under ``airplane`` (12 images became 492, automobiles labelled airplane); with two
loops it never ended. The data are real CIFAR-10 images, linked file by file from the
shared subset (file links are always read).
"""

from __future__ import annotations

import os
import signal
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from ncl_lightning.data import ImageFolderDataModule, ImageNetOODDataModule
from ncl_lightning.foundation.errors import DataError
from ncl_lightning.runtime.cli import cli_main

ROOT = Path(__file__).resolve().parents[2]
CLASSES = ("airplane", "automobile", "bird")
N_TRAIN, N_VAL = 4, 2


@contextmanager
def deadline(seconds: int) -> Iterator[None]:
    """Fail (instead of hanging) when the block runs longer than ``seconds``."""

    def expire(signum: int, frame: object) -> None:
        raise TimeoutError(f"still scanning after {seconds} s: the scan follows a loop")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture
def images(cifar_subset: Path, tmp_path: Path) -> Path:
    """``root/{train,val}/<3 classes>/`` with 4 and 2 real images each (file links)."""
    root = tmp_path / "cifar"
    for split, n in (("train", N_TRAIN), ("val", N_VAL)):
        for name in CLASSES:
            (root / split / name).mkdir(parents=True)
            for image in sorted((cifar_subset / split / name).glob("*.png"))[:n]:
                (root / split / name / image.name).symlink_to(image)
    return root


def _link(path: Path, target: str | Path) -> Path:
    path.symlink_to(target, target_is_directory=True)
    return path


def _setup(root: Path, **kwargs) -> tuple[ImageFolderDataModule, list[str]]:
    """``setup("fit")`` within 60 s; the dm and the messages of the link warnings."""
    dm = ImageFolderDataModule(root=str(root), batch_size=4, num_workers=0, **kwargs)
    with deadline(60), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dm.setup("fit")
    return dm, [str(w.message) for w in caught if "directory link" in str(w.message)]


def _check_labels(dm: ImageFolderDataModule, split: str, per_class: int) -> None:
    """Each class has ``per_class`` distinct images, each the class of its real file."""
    samples = dm.samples(split)
    assert len(samples) == per_class * len(CLASSES)
    for path, label in samples:  # the real file lies in the shared subset's class folder
        assert Path(path).resolve().parent.name == CLASSES[label], path
    real = [Path(p).resolve() for p, _ in samples]
    assert len(set(real)) == len(real), "an image is listed twice"


def test_a_loop_is_skipped_and_counted(images: Path) -> None:
    up = _link(images / "train" / "airplane" / "up", "..")
    dm, messages = _setup(images)
    _check_labels(dm, "train", N_TRAIN)
    _check_labels(dm, "val", N_VAL)
    assert len(dm.train_dataset) == N_TRAIN * len(CLASSES)
    assert messages == [
        f"data.init_args.train_dir: skipped 1 directory link(s) under {images / 'train'} "
        "(links into the dataset or loops are not followed; links to folders outside it are "
        f"followed once): {up} -> {images / 'train'} (a loop: it points to an ancestor)"
    ]


def test_two_loops_end_quickly(images: Path) -> None:
    _link(images / "train" / "airplane" / "up", "..")
    _link(images / "train" / "automobile" / "root", "../..")
    _link(images / "train" / "bird" / "self", ".")
    dm, messages = _setup(images)
    _check_labels(dm, "train", N_TRAIN)
    assert len(messages) == 1, messages  # one per split; val has no link
    assert "skipped 3 directory link(s)" in messages[0]


def test_links_into_another_split_are_skipped(images: Path) -> None:
    leak = _link(images / "train" / "airplane" / "more", images / "val" / "airplane")
    _link(images / "train" / "ship", "../val/bird")  # a class folder linked inside
    dm, messages = _setup(images)
    assert dm.classes == list(CLASSES)  # the linked "ship" is not a class
    _check_labels(dm, "train", N_TRAIN)
    assert len(messages) == 1 and "skipped 2 directory link(s)" in messages[0]
    assert f"{leak} -> {images / 'val' / 'airplane'} (points inside the dataset)" in messages[0]


def test_links_outside_the_dataset_are_followed_once(images: Path, tmp_path: Path) -> None:
    outside = tmp_path / "other-disk"
    extra = outside / "airplane-extra"
    extra.mkdir(parents=True)
    for image in sorted((images / "val" / "airplane").iterdir()):
        (extra / image.name).symlink_to(image.resolve())  # 2 more airplanes
    _link(extra / "again", "..")  # a loop outside the dataset
    _link(images / "train" / "airplane" / "more", extra)
    _link(images / "train" / "airplane" / "more2", extra)  # the same folder twice
    bird = images / "train" / "bird"
    bird.rename(outside / "bird")
    _link(bird, outside / "bird")  # a class folder kept on another disk
    dm, messages = _setup(images)
    counts = [sum(label == i for _, label in dm.samples("train")) for i in range(3)]
    assert counts == [N_TRAIN + N_VAL, N_TRAIN, N_TRAIN]
    assert len(messages) == 1 and "skipped 2 directory link(s)" in messages[0]
    assert "(a folder already scanned)" in messages[0]
    assert "(a loop: it points to an ancestor)" in messages[0]


def test_ood_class_list_scan_follows_the_same_rules(images: Path, tmp_path: Path) -> None:
    (tmp_path / "classes.txt").write_text("\n".join(CLASSES))
    _link(images / "train" / "airplane" / "up", "..")
    dm = ImageNetOODDataModule(
        sketch_root=str(images / "train"),
        class_list=str(tmp_path / "classes.txt"),
        batch_size=4,
        num_workers=0,
    )
    with deadline(60), pytest.warns(UserWarning, match=r"skipped 1 directory link\(s\)"):
        dm.setup("test")
    assert len(dm.test_datasets[0]) == N_TRAIN * len(CLASSES)
    os.unlink(images / "train" / "airplane" / "up")
    os.rename(images / "train" / "bird", tmp_path / "bird")
    _link(images / "train" / "bird", ".")  # a listed class folder that is a loop
    again = ImageNetOODDataModule(
        sketch_root=str(images / "train"), class_list=str(tmp_path / "classes.txt")
    )
    with pytest.raises(DataError) as info:
        again.setup("test")
    assert str(info.value) == (
        f"data.init_args.sketch_root: class folder {images / 'train' / 'bird'} is a link to "
        f"{images / 'train'} (a loop: it points to an ancestor); make it a folder or a link "
        "outside the dataset"
    )


def test_fit_through_the_cli_with_two_loops(images: Path, tmp_path: Path) -> None:
    _link(images / "train" / "airplane" / "up", "..")
    _link(images / "train" / "automobile" / "root", "../..")
    args = [
        "fit",
        "--config", str(ROOT / "configs" / "demo" / "digits_ncl.yaml"),
        "--data", "ncl_lightning.data.ImageFolderDataModule",
        "--data.root", str(images),
        "--data.batch_size", "4",
        "--data.num_workers", "0",
        "--model.init_args.backbone.in_channels", "3",
        "--model.init_args.backbone.width", "8",
        "--trainer.max_steps", "2",
        "--trainer.limit_val_batches", "1",
        "--trainer.enable_progress_bar", "false",
        "--trainer.default_root_dir", str(tmp_path / "run"),
        "--trainer.logger.init_args.save_dir", str(tmp_path / "run"),
    ]  # fmt: skip
    with deadline(120), pytest.warns(UserWarning, match=r"skipped 2 directory link\(s\)"):
        cli = cli_main(args)
    assert cli.trainer.global_step == 2
    assert cli.datamodule.num_classes == len(CLASSES)
    assert cli.datamodule.split_size("train") == N_TRAIN * len(CLASSES)


def test_an_unlistable_folder_is_named(images: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``os.walk`` skipped folders it could not list without a word (as root here, so the
    permission error is simulated)."""
    locked = images / "train" / "bird" / "more"
    locked.mkdir()
    scandir = os.scandir

    def refuse(path: str | Path) -> object:
        if Path(path) == locked:
            raise PermissionError(13, "Permission denied", str(path))
        return scandir(path)

    monkeypatch.setattr(os, "scandir", refuse)
    dm = ImageFolderDataModule(root=str(images), batch_size=4, num_workers=0)
    with pytest.raises(DataError, match=f"^cannot list folder {locked}: Permission denied$"):
        dm.setup("fit")
