"""Reading the images of an image folder: the dataset of ``(path, label)`` pairs, the
check that skips unreadable files, and [`DecodedCacheMixin`][] (scans, skipping, the
decoded-once cache and the input checks of an image-folder DataModule)."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, get_args

import torch
from lightning.pytorch.utilities import rank_zero_warn
from PIL import Image
from torch.utils.data import Dataset

from ncl_lightning.data.base import _STAGE_SPLITS as STAGE_SPLITS
from ncl_lightning.data.base import Split
from ncl_lightning.data.decode import CHANGED_HINT, corrupt_image_error, read_image
from ncl_lightning.data.device_decode import DecodeOn, EncodedBatch, EncodedFiles, decode_batch
from ncl_lightning.data.memory import CacheMode, check_cache, decode_images
from ncl_lightning.foundation.errors import ConfigError, CorruptImageError
from ncl_lightning.foundation.validation import check_choice, check_output_dir

SHOWN = 5  # paths listed in a message before "and N more"


def verify_images(
    samples: Sequence[tuple[str, int]], threads: int | None = None
) -> tuple[list[tuple[str, int]], list[tuple[str, str]]]:
    """Decode every image of ``samples`` once, as the loader does, in a thread pool of
    ``threads`` (PIL releases the GIL); ``(readable samples, [(path, reason), ...] of the
    unreadable ones)``, in order."""

    def problem(sample: tuple[str, int]) -> str | None:
        try:
            read_image(sample[0])
        except CorruptImageError as err:
            return getattr(err, "reason", str(err))
        return None

    with ThreadPoolExecutor(max_workers=threads) as pool:
        problems = list(pool.map(problem, samples, chunksize=64))
    kept = [s for s, p in zip(samples, problems, strict=True) if p is None]
    skipped = [(s[0], p) for s, p in zip(samples, problems, strict=True) if p is not None]
    return kept, skipped


def listing(names: Sequence[str]) -> str:
    """The first [`SHOWN`][] of ``names``, then how many more."""
    more = f" and {len(names) - SHOWN} more" if len(names) > SHOWN else ""
    return ", ".join(names[:SHOWN]) + more


def warn_skipped(skipped: Sequence[tuple[str, str]], total: int, folder: Path) -> None:
    """One warning (rank zero) for the unreadable images left out of ``folder``."""
    if skipped:
        shown = listing([f"{path} ({reason})" for path, reason in skipped])
        rank_zero_warn(
            f"skipped {len(skipped)} unreadable image(s) of {total} in {folder}: {shown}"
        )


class ImageListDataset(Dataset):
    """``(PIL RGB image, label)`` items from a list of ``(path, label)`` pairs.

    Args:
        samples: ``(path, label)`` pairs, e.g. from ``scan_class_folders``.
        classes: Class names in label order.

    Raises:
        CorruptImageError: When an item's file cannot be decoded (names the path; in a
            loader worker, DataLoader re-raises it with the path in its message).
    """

    def __init__(
        self, samples: list[tuple[str, int]], classes: Sequence[str], verified: bool = False
    ) -> None:
        self.samples = samples
        self.verified = verified  # skip_corrupt read every file at setup
        self.classes = list(classes)
        self.class_to_idx = {c: i for i, c in enumerate(self.classes)}
        self.targets = [label for _, label in samples]

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[Image.Image, int]:
        path, label = self.samples[index]
        try:
            return read_image(path), label
        except CorruptImageError as err:
            if not self.verified:
                raise
            raise corrupt_image_error(path, err.reason, CHANGED_HINT) from None  # type: ignore[attr-defined]


class DecodedCacheMixin:
    """Folder scanning, unreadable-file skipping and the decoded-once cache of an
    image-folder DataModule.

    ``__init__`` calls [`use_cache`][]; the DataModule implements [`split_folder`][]
    and [`scan_split`][], and ``build_split`` returns [`image_dataset`][]. Scans are
    cached per folder, so [`check_inputs`][] (which scans) and ``setup`` list each
    folder once. The DataModule has ``num_workers``, ``source_size`` and ``classes``.

    Attributes:
        skipped_images: ``split -> [(path, reason), ...]`` of the unreadable images left
            out with ``skip_corrupt`` (a split is present once built).
    """

    cache: CacheMode
    cache_dir: str | None
    skip_corrupt: bool
    decode_on: DecodeOn = "cpu"
    augment_on: str
    train_dataset: Dataset | None
    num_workers: int
    source_size: int
    classes: list[str]
    skipped_images: dict[str, list[tuple[str, str]]]
    _base: dict[Split, Dataset]

    def use_cache(
        self, cache: CacheMode, cache_dir: str | None, skip_corrupt: bool = False
    ) -> None:
        """Check and keep the ``cache`` mode, ``cache_dir`` and ``skip_corrupt``."""
        check_cache(cache, cache_dir)
        self.cache, self.cache_dir, self.skip_corrupt = cache, cache_dir, skip_corrupt
        self.skipped_images = {}
        self._scans: dict[Path, list[tuple[str, int]]] = {}

    def use_decode(self, decode_on: DecodeOn) -> None:
        """Check and keep ``decode_on``: ``device`` needs ``augment_on: device`` and
        ``cache: none``; the CUDA device is checked by [`check_inputs`][].

        Raises:
            ConfigError: A ``decode_on`` other than ``cpu`` or ``device``, or ``device``
                with ``augment_on: cpu`` or a cache (names ``decode_on``).
        """
        check_choice("decode_on", decode_on, get_args(DecodeOn))
        if decode_on == "device":
            if self.augment_on != "device":
                raise ConfigError(
                    f"decode_on: device needs augment_on: device (the views of GPU-decoded "
                    f"images are made on the GPU), got augment_on: {self.augment_on}",
                    key="decode_on",
                )
            if self.cache != "none":
                raise ConfigError(
                    f"decode_on: device needs cache: none (cache: {self.cache} holds images "
                    "decoded once on the CPU); set decode_on: cpu or cache: none",
                    key="decode_on",
                )
        self.decode_on = decode_on

    @property
    def reads_files(self) -> bool:
        """With ``cache: none`` and ``decode_on: cpu`` the workers decode a file per item."""
        return getattr(self, "cache", "none") == "none" and self.decode_on == "cpu"

    def check_inputs(self, stage: str | None = None, world_size: int = 1) -> None:
        """The base checks, then a disk ``cache_dir`` that cannot be a writable folder and
        (without ``skip_corrupt``) the first image of every class folder of the splits
        ``stage`` needs, decoded: fails before anything is written.

        Raises:
            ConfigError: ``cache_dir`` is a file or cannot be created (names the key).
            CorruptImageError: An image that cannot be decoded (names the path).
        """
        super().check_inputs(stage, world_size)  # type: ignore[misc]
        self._check_decode_device()
        if self.cache == "disk" and self.cache_dir:
            check_output_dir("data.init_args.cache_dir", self.cache_dir)
        if self.skip_corrupt:
            return
        for split in STAGE_SPLITS.get(stage, STAGE_SPLITS[None]):
            first: dict[int, str] = {}
            for path, label in self.samples(split):
                first.setdefault(label, path)
            for path in first.values():
                read_image(path)

    def _check_decode_device(self) -> None:
        """``decode_on: device`` needs CUDA and, once attached, a trainer on a CUDA device."""
        if self.decode_on != "device":
            return
        problem = None
        if not torch.cuda.is_available():
            problem = "CUDA is not available"
        elif getattr(self, "trainer", None) is not None:
            device = getattr(self.trainer.strategy, "root_device", None)  # type: ignore[attr-defined]
            if device is None or device.type != "cuda":
                problem = f"the trainer runs on {device}"
        if problem is not None:
            raise ConfigError(
                f"decode_on: device decodes JPEGs with nvJPEG on a CUDA GPU, but {problem}; "
                "set decode_on: cpu",
                key="decode_on",
            )

    def setup(self, stage: str | None = None) -> None:
        """The base ``setup``; with ``decode_on: device`` the training loader then yields
        [`EncodedBatch`][ncl_lightning.data.device_decode.EncodedBatch]es of the training
        files (after skipping the unreadable ones) instead of decoded images."""
        super().setup(stage)  # type: ignore[misc]
        train = self.train_dataset
        if self.decode_on == "device" and train is not None and not isinstance(train, EncodedFiles):
            base = self.base_dataset("train")  # type: ignore[attr-defined]
            self.train_dataset = EncodedFiles(base.samples)

    def transfer_batch_to_device(
        self, batch: Any, device: torch.device, dataloader_idx: int
    ) -> Any:
        """Decode an [`EncodedBatch`][ncl_lightning.data.device_decode.EncodedBatch] on
        ``device`` into ``(uint8 images [B, 3, S, S], labels)``, ``S = source_size``
        (the bytes stay in host memory, where nvJPEG reads them); any other batch moves
        as Lightning moves it."""
        if isinstance(batch, EncodedBatch):
            return decode_batch(batch, self.source_size, device)
        return super().transfer_batch_to_device(batch, device, dataloader_idx)  # type: ignore[misc]

    def split_folder(self, split: Split) -> Path:
        """The folder of ``split``."""
        raise NotImplementedError(f"{type(self).__name__} must implement split_folder")

    def scan_split(self, split: Split) -> list[tuple[str, int]]:
        """List ``(path, label)`` of ``split`` with one-line errors (no image opened)."""
        raise NotImplementedError(f"{type(self).__name__} must implement scan_split")

    def samples(self, split: Split) -> list[tuple[str, int]]:
        """The scanned ``(path, label)`` pairs of ``split``, cached per folder."""
        folder = self.split_folder(split)
        if folder not in self._scans:
            self._scans[folder] = self.scan_split(split)
        return self._scans[folder]

    def split_size(self, split: Split) -> int:
        """Files of ``split`` (from the scan; after skipping, once built)."""
        if split in self._base:
            return len(self._base[split])  # type: ignore[arg-type]
        return len(self.samples(split))

    def image_dataset(self, split: Split) -> Dataset:
        """The dataset of ``split``: its images read per item (``cache: none``) or
        decoded once to uint8; with ``skip_corrupt``, without the unreadable files."""
        samples = self.samples(split)
        if self.cache == "none":
            kept, skipped = verify_images(samples) if self.skip_corrupt else (samples, [])
            dataset: Dataset = ImageListDataset(kept, self.classes, self.skip_corrupt)
        else:
            dataset = decode_images(
                ImageListDataset(samples, self.classes),
                samples,
                self.source_size,
                self.cache,
                self.cache_dir,
                num_workers=self.num_workers,
                skip_corrupt=self.skip_corrupt,
            )
            skipped = dataset.skipped
        if self.skip_corrupt:
            self.skipped_images[split] = skipped
            warn_skipped(skipped, len(samples), self.split_folder(split))
        return dataset
