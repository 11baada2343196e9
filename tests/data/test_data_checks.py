"""``check_inputs``: every bad data input is one clear line, raised before any training.

Each case crafts a data tree under ``tmp_path``, builds the DataModule and calls
``check_inputs("fit")`` (``"test"`` for the test-only OOD module); the error class, the
single line, the named config key and path are checked, and the tree must be unchanged
(``check_inputs`` is read-only: it writes, extracts and downloads nothing).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from ncl_lightning.data import (
    CIFAR10DataModule,
    CIFAR100DataModule,
    DigitsDataModule,
    DSpritesDataModule,
    ImageFolderDataModule,
    ImageNet100DataModule,
    ImageNetOODDataModule,
    SparseCodingDataModule,
    load_imagenet100_classes,
)
from ncl_lightning.foundation.errors import ConfigError, DataError, DataNotFoundError, NCLError
from tests.fakes import make_image_folder, write_images

WNIDS = load_imagenet100_classes()
SHIPPED = "ncl_lightning/data/resources/imagenet100_classes.txt"


@pytest.fixture(scope="module")
def imagenet_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fake ImageNet-100 tree: the 100 WNID folders of train and val, 2 tiny PNGs each."""
    return make_image_folder(tmp_path_factory.mktemp("in100"), WNIDS, n=2, size=(4, 4))


def _snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Every path under ``root`` with its size and modification time."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            stat = os.stat(os.path.join(dirpath, name))
            out[os.path.relpath(os.path.join(dirpath, name), root)] = (
                stat.st_size,
                stat.st_mtime_ns,
            )
    return out


# ------------------------------------------------------------------- tree builders
def _folder(tmp: Path, classes: tuple[str, ...] = ("a", "b"), n: int = 2) -> Path:
    return make_image_folder(tmp / "data", list(classes), n=n, size=(4, 4))


def _imagenet(tmp: Path, tree: Path) -> Path:
    shutil.copytree(tree, tmp / "in")
    return tmp / "in"


def _fit(dm_factory: Callable[[], object], stage: str = "fit", world_size: int = 1):
    def run() -> None:
        dm = dm_factory()
        dm.check_inputs(stage, world_size)  # type: ignore[attr-defined]

    return run


def _image_folder_dm(root: Path, **kwargs) -> Callable[[], object]:
    kwargs = {"image_size": 4, "batch_size": 2, "num_workers": 0, **kwargs}
    return lambda: ImageFolderDataModule(root=str(root), **kwargs)


def _imagenet_dm(root: Path, **kwargs) -> Callable[[], object]:
    return lambda: ImageNet100DataModule(root=str(root), batch_size=2, num_workers=0, **kwargs)


def case_folder_root_missing(tmp: Path, tree: Path):
    fragments = [f"data.init_args.root: data folder not found: {tmp / 'nowhere'}", "train/"]
    return _fit(_image_folder_dm(tmp / "nowhere")), DataNotFoundError, fragments


def case_folder_train_dir_missing(tmp: Path, tree: Path):
    root = _folder(tmp)
    shutil.rmtree(root / "train")
    fragments = [f"data.init_args.train_dir: split folder not found: {root / 'train'}"]
    return _fit(_image_folder_dm(root)), DataNotFoundError, fragments


def case_folder_no_class_folders(tmp: Path, tree: Path):
    root = _folder(tmp)
    shutil.rmtree(root / "train")
    (root / "train").mkdir()
    fragments = [f"data.init_args.train_dir: no class folders and no images in {root / 'train'}"]
    return _fit(_image_folder_dm(root)), DataNotFoundError, fragments


def case_folder_val_dir_missing(tmp: Path, tree: Path):
    root = _folder(tmp)
    fragments = [f"data.init_args.val_dir: split folder not found: {root / 'valid'}"]
    return _fit(_image_folder_dm(root, val_dir="valid")), DataNotFoundError, fragments


def case_folder_val_class_missing(tmp: Path, tree: Path):
    root = _folder(tmp)
    shutil.rmtree(root / "val" / "b")
    fragments = [f"data.init_args.val_dir: class folder(s) missing under {root / 'val'}: b"]
    return _fit(_image_folder_dm(root)), DataNotFoundError, fragments


def case_folder_empty_class(tmp: Path, tree: Path):
    root = _folder(tmp)
    for f in (root / "val" / "b").iterdir():
        f.unlink()
    (root / "val" / "b" / "notes.txt").write_text("not an image")
    fragments = [
        f"data.init_args.val_dir: empty class folder: {root / 'val' / 'b'}",
        "(no files with extensions .jpg, .jpeg, .png",
    ]
    return _fit(_image_folder_dm(root)), DataNotFoundError, fragments


def case_folder_extra_val_class(tmp: Path, tree: Path):
    root = _folder(tmp)
    write_images(root / "val" / "zebra", 1, size=(4, 4))
    fragments = ["data.init_args.val_dir:", "absent from the training folder", "zebra"]
    return _fit(_image_folder_dm(root)), DataError, fragments


def case_folder_test_dir_missing(tmp: Path, tree: Path):
    root = _folder(tmp)
    factory = _image_folder_dm(root, test_dir="test")
    fragments = [f"data.init_args.test_dir: split folder not found: {root / 'test'}"]
    return _fit(factory, stage="test"), DataNotFoundError, fragments


def case_folder_fewer_than_one_batch(tmp: Path, tree: Path):
    root = _folder(tmp)
    fragments = [
        "data: the training split has 4 samples (4 per device), fewer than one batch "
        "(data.init_args.batch_size=8) with drop_last=True; lower batch_size"
    ]
    return _fit(_image_folder_dm(root, batch_size=8)), DataError, fragments


def case_folder_fewer_than_one_batch_per_device(tmp: Path, tree: Path):
    root = _folder(tmp, n=4)
    fragments = ["has 8 samples (4 per device)", "batch_size=6"]
    run = _fit(_image_folder_dm(root, batch_size=6), world_size=2)
    return run, DataError, fragments


def case_imagenet_root_missing(tmp: Path, tree: Path):
    fragments = [f"data.init_args.root: ImageNet folder not found: {tmp / 'nowhere'}"]
    return _fit(_imagenet_dm(tmp / "nowhere")), DataNotFoundError, fragments


def case_imagenet_train_dir_missing(tmp: Path, tree: Path):
    root = _imagenet(tmp, tree)
    shutil.rmtree(root / "train")
    fragments = [f"data.init_args.train_dir: ImageNet-100 train folder not found: {root}"]
    return _fit(_imagenet_dm(root)), DataNotFoundError, fragments


def case_imagenet_classes_missing(tmp: Path, tree: Path):
    root = _imagenet(tmp, tree)
    gone = WNIDS[3:10]
    for wnid in gone:
        shutil.rmtree(root / "train" / wnid)
    fragments = [
        f"data.init_args.train_dir: ImageNet-100 class folder(s) missing under "
        f"{root / 'train'}: {', '.join(gone[:5])} and 2 more (7 of 100 classes); the 100 "
        f"classes are listed in {SHIPPED}",
        # the way out for a user's own subset or folder, on the same line
        "for other classes give --data.init_args.class_list <file of WNIDs>",
        "--data ncl_lightning.data.ImageFolderDataModule (docs: 'Your own data')",
    ]
    return _fit(_imagenet_dm(root)), DataNotFoundError, fragments


def case_imagenet_val_class_missing(tmp: Path, tree: Path):
    root = _imagenet(tmp, tree)
    shutil.rmtree(root / "val" / WNIDS[-1])
    fragments = ["data.init_args.val_dir: ImageNet-100 class folder(s) missing", WNIDS[-1]]
    return _fit(_imagenet_dm(root)), DataNotFoundError, fragments


def case_imagenet_empty_class(tmp: Path, tree: Path):
    root = _imagenet(tmp, tree)
    for f in (root / "train" / WNIDS[42]).iterdir():
        f.unlink()
    fragments = [f"data.init_args.train_dir: empty class folder: {root / 'train' / WNIDS[42]}"]
    return _fit(_imagenet_dm(root)), DataNotFoundError, fragments


def case_imagenet_fewer_than_one_batch(tmp: Path, tree: Path):
    root = _imagenet(tmp, tree)
    factory = lambda: ImageNet100DataModule(root=str(root), batch_size=256, num_workers=0)  # noqa: E731
    fragments = ["has 200 samples (200 per device)", "data.init_args.batch_size=256"]
    return _fit(factory), DataError, fragments


def case_cifar10_missing_no_download(tmp: Path, tree: Path):
    factory = lambda: CIFAR10DataModule(root=str(tmp / "cifar"), num_workers=0)  # noqa: E731
    fragments = [
        f"data.init_args.root: CIFAR-10 not found in {tmp / 'cifar' / 'cifar-10-batches-py'}",
        "--data.init_args.download true",
        f"place cifar-10-python.tar.gz (python version) in {tmp / 'cifar'}",
    ]
    return _fit(factory), DataNotFoundError, fragments


def case_cifar100_partial_files(tmp: Path, tree: Path):
    folder = tmp / "cifar" / "cifar-100-python"
    folder.mkdir(parents=True)
    (folder / "train").write_bytes(b"x")
    factory = lambda: CIFAR100DataModule(root=str(tmp / "cifar"), num_workers=0)  # noqa: E731
    fragments = [f"CIFAR-100 not found in {folder} (missing test, meta)", "download true"]
    return _fit(factory), DataNotFoundError, fragments


def case_ood_root_missing(tmp: Path, tree: Path):
    root = tmp / "stylized"
    factory = lambda: ImageNetOODDataModule(stylized_root=str(root), num_workers=0)  # noqa: E731
    fragments = [f"data.init_args.stylized_root: Stylized-ImageNet folder not found: {root}"]
    return _fit(factory, stage="test"), DataNotFoundError, fragments


def case_ood_class_missing(tmp: Path, tree: Path):
    root = _imagenet(tmp, tree) / "val"
    shutil.rmtree(root / WNIDS[0])
    factory = lambda: ImageNetOODDataModule(sketch_root=str(root), num_workers=0)  # noqa: E731
    fragments = [
        f"data.init_args.sketch_root: ImageNet-Sketch class folder(s) missing under {root}: "
        f"{WNIDS[0]} (1 of 100 classes)"
    ]
    return _fit(factory, stage="test"), DataNotFoundError, fragments


def case_ood_corruption_missing(tmp: Path, tree: Path):
    write_images(tmp / "imc" / "fog" / "1" / WNIDS[0], 1, size=(4, 4))
    (tmp / "classes.txt").write_text(WNIDS[0] + "\n")
    factory = lambda: ImageNetOODDataModule(  # noqa: E731
        imagenet_c_root=str(tmp / "imc"),
        class_list=str(tmp / "classes.txt"),
        corruptions=["fog", "snow"],
        severities=[1],
    )
    fragments = [
        f"data.init_args.imagenet_c_root: ImageNet-C snow folder not found: {tmp / 'imc' / 'snow'}",
        "leave snow out of data.init_args.corruptions",
    ]
    return _fit(factory, stage="test"), DataNotFoundError, fragments


def case_ood_fit_stage(tmp: Path, tree: Path):
    factory = lambda: ImageNetOODDataModule(sketch_root=str(tmp))  # noqa: E731
    fragments = ["ImageNetOODDataModule is test-only (stage 'fit' is not supported)"]
    return _fit(factory), ConfigError, fragments


def case_digits_fewer_than_one_batch(tmp: Path, tree: Path):
    factory = lambda: DigitsDataModule(batch_size=2000)  # noqa: E731
    fragments = ["the training split has 1437 samples", "data.init_args.batch_size=2000"]
    return _fit(factory), DataError, fragments


def case_dsprites_fewer_than_one_batch_per_device(tmp: Path, tree: Path):
    factory = lambda: DSpritesDataModule(train_size=100, val_size=10, test_size=10, batch_size=64)  # noqa: E731
    fragments = ["has 100 samples (50 per device)", "batch_size=64", "data.init_args.train_size"]
    return _fit(factory, world_size=2), DataError, fragments


def case_sparse_coding_fewer_than_one_batch_per_device(tmp: Path, tree: Path):
    factory = lambda: SparseCodingDataModule(n=100, batch_size=64, val_n=10)  # noqa: E731
    fragments = ["has 100 samples (50 per device)", "batch_size=64", "data.init_args.n"]
    return _fit(factory, world_size=2), DataError, fragments


CASES = [
    case_folder_root_missing,
    case_folder_train_dir_missing,
    case_folder_no_class_folders,
    case_folder_val_dir_missing,
    case_folder_val_class_missing,
    case_folder_empty_class,
    case_folder_extra_val_class,
    case_folder_test_dir_missing,
    case_folder_fewer_than_one_batch,
    case_folder_fewer_than_one_batch_per_device,
    case_imagenet_root_missing,
    case_imagenet_train_dir_missing,
    case_imagenet_classes_missing,
    case_imagenet_val_class_missing,
    case_imagenet_empty_class,
    case_imagenet_fewer_than_one_batch,
    case_cifar10_missing_no_download,
    case_cifar100_partial_files,
    case_ood_root_missing,
    case_ood_class_missing,
    case_ood_corruption_missing,
    case_ood_fit_stage,
    case_digits_fewer_than_one_batch,
    case_dsprites_fewer_than_one_batch_per_device,
    case_sparse_coding_fewer_than_one_batch_per_device,
]


@pytest.mark.parametrize("case", CASES, ids=[c.__name__.removeprefix("case_") for c in CASES])
def test_bad_data_input_is_one_clear_line(
    case: Callable, tmp_path: Path, imagenet_tree: Path
) -> None:
    run, error_cls, fragments = case(tmp_path, imagenet_tree)
    before = _snapshot(tmp_path)
    with pytest.raises(error_cls) as info:
        run()
    message = str(info.value)
    assert isinstance(info.value, NCLError)
    assert "\n" not in message, message
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    assert _snapshot(tmp_path) == before, "check_inputs changed the data tree"


def test_errors_keep_the_builtin_classes(tmp_path: Path) -> None:
    """``except FileNotFoundError`` / ``except ValueError`` keep working."""
    with pytest.raises(FileNotFoundError):
        ImageFolderDataModule(root=str(tmp_path / "nowhere"))
    with pytest.raises(ValueError):
        DigitsDataModule(batch_size=2000).check_inputs("fit")


def test_valid_inputs_pass_and_setup_does_not_scan_again(
    imagenet_tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dm = ImageNet100DataModule(root=str(imagenet_tree), batch_size=8, num_workers=0)
    before = _snapshot(imagenet_tree)
    dm.check_inputs("fit")
    dm.check_inputs("test")
    assert _snapshot(imagenet_tree) == before
    walked: list[str] = []
    real_walk = os.walk

    def spy_walk(top: str, *args: object, **kwargs: object):
        walked.append(str(top))
        return real_walk(top, *args, **kwargs)

    monkeypatch.setattr(os, "walk", spy_walk)
    dm.setup("fit")  # calls check_inputs again: the cached scans, no second listing
    assert walked == []
    assert len(dm.train_dataset) == 200 and len(dm.val_dataset) == 200


def test_setup_runs_the_checks(tmp_path: Path) -> None:
    """Python users (no CLI) get the same error from ``setup``."""
    root = _folder(tmp_path)
    shutil.rmtree(root / "val" / "b")
    dm = ImageFolderDataModule(root=str(root), image_size=4, batch_size=2, num_workers=0)
    with pytest.raises(DataNotFoundError, match=r"^data.init_args.val_dir: class folder\(s\)"):
        dm.setup("fit")
    assert dm.train_dataset is None


def test_validate_and_test_stages_check_only_their_splits(tmp_path: Path) -> None:
    root = _folder(tmp_path)  # 4 training images
    dm = ImageFolderDataModule(
        root=str(root), image_size=4, batch_size=64, num_workers=0, test_dir="val"
    )
    dm.check_inputs("test")  # train too small for a batch: irrelevant when testing
    with pytest.raises(DataError, match="fewer than one batch"):
        dm.check_inputs("fit")


def test_generated_data_pass(tmp_path: Path) -> None:
    DSpritesDataModule(train_size=128, val_size=8, test_size=8, batch_size=64).check_inputs(
        "fit", 2
    )
    SparseCodingDataModule(n=128, batch_size=64, val_n=8).check_inputs("fit", 2)
    DigitsDataModule(batch_size=64).check_inputs(None)
