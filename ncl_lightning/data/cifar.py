"""CIFAR-10 and CIFAR-100 (Krizhevsky, 2009) through ``torchvision.datasets``.

Nothing is downloaded unless ``download=True``. The training split is CIFAR's training
set; validation and test are both CIFAR's test set (the papers report on it). Files are
looked for in ``root/cifar-10-batches-py`` (``root/cifar-100-python``); an archive
``cifar-10-python.tar.gz`` (``cifar-100-python.tar.gz``) placed in ``root`` is
extracted without any network access. A failed download names its cause (no network,
DNS, unreachable host, HTTP status) and the way out without network.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import torch
from torch.utils.data import Dataset
from torchvision.datasets import CIFAR10, CIFAR100
from torchvision.datasets.utils import check_integrity, extract_archive

from ncl_lightning.data.base import Split
from ncl_lightning.data.download import download_failure_cause
from ncl_lightning.data.held import HeldOnDeviceDataModule
from ncl_lightning.data.memory import TensorImageDataset
from ncl_lightning.data.transforms import (
    SimCLRAugmentation,
    cifar100_augmentation,
    cifar_augmentation,
)
from ncl_lightning.foundation.errors import DataError, DataNotFoundError

SAMPLES_PER_FILE = 10_000  # every CIFAR batch file (md5-checked) holds 10,000 images


class CIFARChecksumError(DataError, RuntimeError):
    """CIFAR files that fail torchvision's md5 check (a ``RuntimeError`` there, too)."""


class _CIFARDataModule(HeldOnDeviceDataModule):
    """Shared CIFAR logic; subclasses set ``dataset_cls``, ``name`` and ``num_classes``."""

    dataset_cls: type[CIFAR10] = CIFAR10
    name = "CIFAR-10"
    # The data set's Hugging Face hub id (an exported model card's ``datasets``).
    hub_id: ClassVar[str | None] = None

    def __init__(
        self,
        root: str = "data/cifar",
        download: bool = False,
        hold_on_device: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(hold_on_device=hold_on_device, **kwargs)
        self.root = Path(root).expanduser()
        self.download = download
        self.in_channels = 3
        self.image_size = 32

    @property
    def folder(self) -> Path:
        """Folder holding the python-version batch files."""
        return self.root / self.dataset_cls.base_folder

    def _all_files(self) -> list[str]:
        cls = self.dataset_cls
        return [n for n, _ in cls.train_list + cls.test_list] + [cls.meta["filename"]]

    def _missing_files(self) -> list[str]:
        return [n for n in self._all_files() if not (self.folder / n).is_file()]

    def layout(self) -> str:
        """The files expected under ``root``, e.g.
        ``<root>/cifar-10-batches-py/{data_batch_1, ..., test_batch, batches.meta}``."""
        return f"{self.folder}/{{{', '.join(self._all_files())}}}"

    def _placement(self) -> str:
        return (
            f"place {self.dataset_cls.filename} (python version) in {self.root}, or the "
            f"extracted files as {self.layout()}"
        )

    def _require_files(self) -> None:
        missing = self._missing_files()
        if missing:
            all_missing = len(missing) == len(self._all_files())
            reason = "no data files" if all_missing else f"missing {', '.join(missing)}"
            raise DataNotFoundError(
                f"data.init_args.root: {self.name} not found in {self.folder} ({reason}): "
                "pass `--data.init_args.download true` (YAML `download: true`) to download "
                "it, or " + self._placement()
            )

    def _download_failed(self, err: BaseException) -> DataNotFoundError:
        cause = download_failure_cause(err, self.dataset_cls.url)
        return DataNotFoundError(
            f"data.init_args.root: {self.name} download failed: {cause}. Without network, "
            f"{self._placement()} (nothing is downloaded then); or run once where there is "
            f"network (download is already true)"
        )

    def _archive_ok(self) -> bool:
        archive = self.root / self.dataset_cls.filename
        return archive.is_file() and check_integrity(str(archive), self.dataset_cls.tgz_md5)

    def check_inputs(self, stage: str | None = None, world_size: int = 1) -> None:
        """Check that the files are there, or can be extracted from a placed archive, or
        will be downloaded (``download: true``); then the base checks (batch size).

        Read-only: nothing is extracted or downloaded here (``prepare_data`` does it).

        Raises:
            DataNotFoundError: Files missing, no valid archive in ``root`` and
                ``download`` false; the message says how to get them.
        """
        if not self.download and not self._archive_ok():
            self._require_files()
        super().check_inputs(stage, world_size)

    def split_size(self, split: Split) -> int:
        """CIFAR's sizes (50,000 train, 10,000 val/test) until the split is loaded."""
        if split in self._base:
            return len(self._base[split])  # type: ignore[arg-type]
        files = self.dataset_cls.train_list if split == "train" else self.dataset_cls.test_list
        return SAMPLES_PER_FILE * len(files)

    def prepare_data(self) -> None:
        """Extract a placed archive, or download when ``download=True`` (rank 0 only)."""
        if not self._missing_files():
            return
        if self._archive_ok():
            extract_archive(str(self.root / self.dataset_cls.filename), str(self.root))
            return
        if not self.download:
            return  # setup() raises the error, on every rank
        self.root.mkdir(parents=True, exist_ok=True)
        try:
            self.dataset_cls(str(self.root), train=True, download=True)
        except (OSError, RuntimeError) as err:  # URLError is an OSError
            raise self._download_failed(err) from err

    def build_split(self, split: Split) -> Dataset:
        """CIFAR training set for ``train``; the test set for ``val`` and ``test``; both
        held in memory as uint8 ``[N, 3, 32, 32]`` tensors."""
        if split == "test":
            return self.base_dataset("val")
        if self._missing_files():
            self.prepare_data()  # no-op unless an archive is placed or download=True
        self._require_files()
        try:
            data = self.dataset_cls(str(self.root), train=split == "train", download=False)
        except RuntimeError as err:  # torchvision's md5 check
            reason = " ".join(str(err).split())
            raise CIFARChecksumError(
                f"data.init_args.root: {self.name} files in {self.folder} fail their md5 "
                f"check (corrupted or partial); delete the folder and download again ({reason})"
            ) from err
        # One uint8 tensor [N, 3, 32, 32] (150 MB for the training set): no PIL per item.
        images = torch.from_numpy(data.data).permute(0, 3, 1, 2).contiguous()
        return TensorImageDataset(images, data.targets)

    def default_augmentation(self) -> SimCLRAugmentation:
        """The paper's CIFAR augmentation (``cifar_augmentation()``)."""
        return cifar_augmentation()


class CIFAR10DataModule(_CIFARDataModule):
    """CIFAR-10: 50k training / 10k test images, 32x32 RGB, 10 classes.

    Training batches are SimCLR views (``cifar_augmentation``); validation and test
    batches are the clean test set.

    Args:
        root: Folder holding (or to receive) ``cifar-10-batches-py``.
        download: Download the archive if the files are missing (never otherwise).
        hold_on_device: Hold the uint8 training set (150 MB) on the training device: the
            loader yields only the drawn indices and labels, in the main process
            (``num_workers: null`` gives 0), and the images are gathered on the device
            ([`HeldOnDeviceDataModule`][]); same batches and views as without it. Needs
            ``augment_on: device``.
        **kwargs: Loader and view options of [`MultiViewDataModule`][] (``batch_size``,
            ``num_workers``, ``n_views``, ``augmentation``, ``pin_memory``, ...).

    Raises:
        DataNotFoundError: At ``check_inputs`` (called by ``setup``) when the files
            are missing and cannot be obtained; the message names the folder and how to
            fix it.
        ConfigError: ``hold_on_device`` without ``augment_on: device``.
    """

    dataset_cls = CIFAR10
    name = "CIFAR-10"
    num_classes = 10
    hub_id = "uoft-cs/cifar10"


class CIFAR100DataModule(_CIFARDataModule):
    """CIFAR-100: 50k training / 10k test images, 32x32 RGB, 100 fine classes.

    Arguments and errors as [`CIFAR10DataModule`][], with ``root`` holding (or to receive)
    ``cifar-100-python``.
    """

    dataset_cls = CIFAR100
    name = "CIFAR-100"
    num_classes = 100
    hub_id = "uoft-cs/cifar100"

    def default_augmentation(self) -> SimCLRAugmentation:
        """The paper's CIFAR augmentation with CIFAR-100's statistics
        (``cifar100_augmentation()``), for pre-training and evaluation alike."""
        return cifar100_augmentation()
