"""Small data in the real on-disk formats, made by tests (shared by data and CLI tests).

CIFAR: real python-version pickles read by torchvision's own loader. torchvision checks
every file against the md5 of the real release, which no fake file can match, so
``make_fake_cifar`` replaces the md5 tables of the torchvision class (via ``monkeypatch``)
with the md5 of the fake files; the integrity check itself still runs.
"""

from __future__ import annotations

import hashlib
import pickle
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from torchvision.datasets import CIFAR10

N_PER_FILE = 8


def md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


def _write_pickle(path: Path, obj: dict) -> None:
    with open(path, "wb") as f:
        pickle.dump(obj, f, protocol=2)


def make_fake_cifar(
    root: Path, cls: type[CIFAR10], num_classes: int, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """Write every file of ``cls`` under ``root`` and patch its md5 table; return folder."""
    folder = root / cls.base_folder
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    label_key = "labels" if cls is CIFAR10 else "fine_labels"
    patched = {}
    for list_name in ("train_list", "test_list"):
        rows = []
        for name, _ in getattr(cls, list_name):
            entry = {
                "batch_label": name,
                "data": rng.integers(0, 256, (N_PER_FILE, 3 * 32 * 32), dtype=np.uint8),
                label_key: rng.integers(0, num_classes, N_PER_FILE).tolist(),
                "filenames": [f"img_{i}.png" for i in range(N_PER_FILE)],
            }
            _write_pickle(folder / name, entry)
            rows.append([name, md5(folder / name)])
        patched[list_name] = rows
    meta_key = cls.meta["key"]
    _write_pickle(folder / cls.meta["filename"], {meta_key: [f"c{i}" for i in range(num_classes)]})
    patched["meta"] = {**cls.meta, "md5": md5(folder / cls.meta["filename"])}
    for attr, value in patched.items():
        monkeypatch.setattr(cls, attr, value)
    return folder


def write_images(folder: Path, n: int, size: tuple[int, int] = (12, 10), seed: int = 0) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for i in range(n):
        pixels = rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
        Image.fromarray(pixels).save(folder / f"img_{i}.png")


def make_image_folder(
    root: Path,
    classes: list[str],
    n: int,
    splits: tuple[str, ...] = ("train", "val"),
    size: tuple[int, int] = (12, 10),
) -> Path:
    """An ImageFolder tree ``root/<split>/<class>/img_<i>.png`` of random RGB PNGs."""
    for s, split in enumerate(splits):
        for c, name in enumerate(classes):
            write_images(root / split / name, n, size=size, seed=100 * s + c)
    return root


def make_superclass_folder(source: Path, target: Path, groups: dict[str, list[str]]) -> Path:
    """A new labelled ImageFolder whose classes group ``source``'s classes (symlinked
    images), e.g. CIFAR-10 as "animal" vs "vehicle": a different task on real images."""
    for split in ("train", "val"):
        for group, members in groups.items():
            folder = target / split / group
            folder.mkdir(parents=True, exist_ok=True)
            for member in members:
                for image in sorted((source / split / member).iterdir()):
                    (folder / f"{member}_{image.name}").symlink_to(image)
    return target
