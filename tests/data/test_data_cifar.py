"""CIFAR-10/100 DataModules on small fake files in the real on-disk format.

The fake files are real python-version CIFAR pickles (``data`` uint8 ``[N, 3072]``,
``labels`` / ``fine_labels``, the meta file with the class names), read by torchvision's
own loader. torchvision checks every file against the md5 of the *real* release, which
no fake file can match, so the tests replace the md5 tables of the torchvision classes
(``train_list``, ``test_list``, ``meta``, ``tgz_md5``) with the md5 of the fake files;
the integrity check itself still runs. Nothing touches the network.
"""

from __future__ import annotations

import errno
import shutil
import socket
import tarfile
import urllib.request
from collections.abc import Callable
from email.message import Message
from pathlib import Path
from urllib.error import HTTPError, URLError

import pytest
import torchvision.datasets.cifar as tv_cifar
from torchvision.datasets import CIFAR10, CIFAR100

from ncl_lightning.data import (
    CIFAR100_MEAN,
    CIFAR100_STD,
    CIFAR_MEAN,
    CIFAR10DataModule,
    CIFAR100DataModule,
)
from ncl_lightning.foundation.errors import DataNotFoundError
from tests.fakes import N_PER_FILE, make_fake_cifar, md5


@pytest.mark.parametrize(
    ("module", "cls", "num_classes", "n_train_files"),
    [(CIFAR10DataModule, CIFAR10, 10, 5), (CIFAR100DataModule, CIFAR100, 100, 1)],
)
def test_batches_from_fake_files(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    check_batches: Callable[..., None],
    module: type[CIFAR10DataModule],
    cls: type[CIFAR10],
    num_classes: int,
    n_train_files: int,
) -> None:
    make_fake_cifar(tmp_path, cls, num_classes, monkeypatch)
    dm = module(root=str(tmp_path), batch_size=4, num_workers=0)
    assert (dm.num_classes, dm.in_channels, dm.image_size) == (num_classes, 3, 32)
    dm.setup("fit")
    assert len(dm.train_dataset) == n_train_files * N_PER_FILE
    assert len(dm.val_dataset) == N_PER_FILE
    check_batches(dm)
    dm.setup("test")
    images, _ = next(iter(dm.test_dataloader()))
    assert images.shape == (4, 3, 32, 32)
    assert dm.base_dataset("test") is dm.base_dataset("val")


def test_missing_files_error_names_folder_and_flag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_download(*args: object, **kwargs: object) -> None:
        raise AssertionError("downloaded although download=False")

    monkeypatch.setattr(tv_cifar, "download_and_extract_archive", no_download)
    dm = CIFAR10DataModule(root=str(tmp_path / "nowhere"), num_workers=0)
    dm.prepare_data()  # must not download
    with pytest.raises(FileNotFoundError, match=r"--data\.init_args\.download true") as info:
        dm.setup("fit")
    message = str(info.value)
    assert str(tmp_path / "nowhere" / "cifar-10-batches-py") in message
    assert "cifar-10-python.tar.gz" in message and "\n" not in message
    assert f"{tmp_path}/nowhere/cifar-10-batches-py/{{data_batch_1, " in message


def test_download_failure_is_one_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def offline(*args: object, **kwargs: object) -> None:
        raise URLError("no network")

    monkeypatch.setattr(tv_cifar, "download_and_extract_archive", offline)
    dm = CIFAR100DataModule(root=str(tmp_path), download=True, num_workers=0)
    with pytest.raises(FileNotFoundError, match=r"download failed.*no network") as info:
        dm.prepare_data()
    message = str(info.value)
    assert f"{tmp_path}/cifar-100-python/{{train, test, meta}}" in message
    assert "\n" not in message


HOST = "www.cs.toronto.edu"
HEADERS = Message()
OFFLINE = [
    (URLError(socket.gaierror(-2, "Name or service not known")), f"DNS lookup of {HOST} failed"),
    (URLError(OSError(errno.ENETUNREACH, "Network is unreachable")), "network or host"),
    (URLError(ConnectionRefusedError(111, "Connection refused")), f"{HOST} refused"),
    (ConnectionResetError(104, "Connection reset by peer"), f"connection to {HOST} failed"),
    (URLError(TimeoutError("timed out")), f"connection to {HOST} timed out"),
    (TimeoutError("The read operation timed out"), "timed out"),
    (HTTPError(f"https://{HOST}/x", 503, "Service Unavailable", HEADERS, None), "HTTP 503"),
]


@pytest.mark.parametrize(("error", "cause"), OFFLINE, ids=lambda x: type(x).__name__)
def test_download_failure_names_the_cause_and_the_offline_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: Exception, cause: str
) -> None:
    """urllib's opener raises what it raises without network (no real network here):
    the error names that cause, where to put the files, and never says to pass
    ``download true`` (it is true)."""
    tried = []

    def urlopen(request: object, *args: object, **kwargs: object) -> None:
        tried.append(getattr(request, "full_url", request))
        raise error

    monkeypatch.setattr(urllib.request, "urlopen", urlopen)
    root = tmp_path / "cifar"
    dm = CIFAR10DataModule(root=str(root), download=True, num_workers=0)
    with pytest.raises(DataNotFoundError) as info:
        dm.prepare_data()
    message = str(info.value)
    assert tried and all(HOST in url for url in tried)
    assert message.startswith("data.init_args.root: CIFAR-10 download failed: ")
    assert cause in message and "\n" not in message
    files = "data_batch_1, data_batch_2, data_batch_3, data_batch_4, data_batch_5"
    assert f"{root}/cifar-10-batches-py/{{{files}, test_batch, batches.meta}}" in message
    assert f"place cifar-10-python.tar.gz (python version) in {root}" in message
    assert "where there is network" in message and "--data.init_args.download" not in message


def test_placed_archive_is_extracted_without_network(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = make_fake_cifar(tmp_path / "src", CIFAR10, 10, monkeypatch)
    root = tmp_path / "root"
    root.mkdir()
    archive = root / CIFAR10.filename
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(folder, arcname=folder.name)
    shutil.rmtree(tmp_path / "src")
    monkeypatch.setattr(CIFAR10, "tgz_md5", md5(archive))
    dm = CIFAR10DataModule(root=str(root), batch_size=4, num_workers=0)
    dm.prepare_data()
    dm.setup("fit")
    assert len(dm.train_dataset) == 5 * N_PER_FILE


def test_corrupted_file_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = make_fake_cifar(tmp_path, CIFAR10, 10, monkeypatch)
    (folder / "data_batch_3").write_bytes(b"truncated")
    dm = CIFAR10DataModule(root=str(tmp_path), batch_size=4, num_workers=0)
    with pytest.raises(RuntimeError, match=r"fail their md5 check"):
        dm.setup("fit")


def test_partial_files_are_listed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = make_fake_cifar(tmp_path, CIFAR10, 10, monkeypatch)
    (folder / "test_batch").unlink()
    dm = CIFAR10DataModule(root=str(tmp_path), batch_size=4, num_workers=0)
    with pytest.raises(FileNotFoundError, match=r"cifar-10-batches-py \(missing test_batch\)"):
        dm.setup("fit")


def test_cifar100_views_are_normalised_with_cifar100_statistics(tmp_path) -> None:
    # The releases normalise CIFAR-100 pre-training with its own statistics.
    aug100 = CIFAR100DataModule(root=str(tmp_path)).default_augmentation()
    assert (aug100.mean, aug100.std) == (CIFAR100_MEAN, CIFAR100_STD)
    assert aug100.blur_p == 0.5 and aug100.crop_size == 32
    assert CIFAR10DataModule(root=str(tmp_path)).default_augmentation().mean == CIFAR_MEAN
