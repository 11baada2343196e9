"""Issue 33, finding 10: a run refused for its input leaves nothing behind.

What can be checked before the run writes anything is checked there (an image folder's
first image of every class is decoded, a disk ``cache_dir`` must be a writable folder);
what only the first batch finds (an unreadable image further down) makes the run remove
the folders, lock files and config files it created (``RunLock``), so the next run
gets the same ``version_N``. What existed before is never touched."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ncl_lightning.runtime.cli import main
from tests.helpers.cli import DEMO, refused_fit

CLASSES = ("airplane", "automobile")
GARBAGE = bytes(range(256)) * 4


@pytest.fixture
def images(cifar_subset: Path, tmp_path: Path) -> Path:
    """2 classes x 12 training and 4 validation images of the real subset."""
    root = tmp_path / "images"
    for split, n in (("train", 12), ("val", 4)):
        for name in CLASSES:
            (root / split / name).mkdir(parents=True)
            for image in sorted((cifar_subset / split / name).glob("*.png"))[:n]:
                shutil.copy2(image, root / split / name / image.name)
    return root


def _folder_args(root: Path, *extra: str) -> list[str]:
    return [
        "--data", "ncl_lightning.data.ImageFolderDataModule", "--data.init_args.root", str(root),
        "--data.init_args.batch_size", "8", "--data.init_args.num_workers", "0",
        "--model.init_args.backbone.init_args.in_channels", "3", "--trainer.max_steps", "2",
        "--trainer.enable_progress_bar", "false", *extra,
    ]  # fmt: skip


def _damage(root: Path, first: bool) -> Path:
    """Garbage in the first training image of a class, or in every other one."""
    files = sorted((root / "train" / CLASSES[0]).glob("*.png"))
    for path in files[:1] if first else files[1:]:
        path.write_bytes(GARBAGE)
    return files[0] if first else files[1]


def test_a_first_image_that_cannot_be_read_is_refused_before_the_run(
    images: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    bad = _damage(images, first=True)
    line = refused_fit("digits_ncl", _folder_args(images), tmp_path, capsys)
    assert line == (
        f"ncl-cli: error: cannot read image {bad}: cannot identify image file; set "
        "data.init_args.skip_corrupt: true to skip unreadable images"
    )


def test_a_cache_folder_that_is_a_file_is_refused_before_the_run(
    images: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    afile = tmp_path / "afile"
    afile.write_text("x")
    extra = ["--data.init_args.cache", "disk", "--data.init_args.cache_dir", str(afile)]
    line = refused_fit("digits_ncl", _folder_args(images, *extra), tmp_path, capsys)
    assert line == f"ncl-cli: error: data.init_args.cache_dir: {afile} is a file, not a folder"


@pytest.mark.parametrize("cache", ["none", "memory"])
def test_a_refusal_at_the_first_batch_removes_what_the_run_created(
    images: Path, tmp_path: Path, capsys: pytest.CaptureFixture, cache: str
) -> None:
    """The first batch (or the memory cache's decode pass) meets an unreadable image:
    ``refused_fit`` checks that the output folder does not exist afterwards."""
    _damage(images, first=False)
    extra = _folder_args(images, "--data.init_args.cache", cache)
    line = refused_fit("digits_ncl", extra, tmp_path, capsys)
    assert "cannot identify image file" in line


def test_a_refused_run_leaves_an_earlier_run_alone_and_takes_no_version(
    images: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "out"
    common = [
        "fit", "--config", str(DEMO / "digits_ncl.yaml"), "--trainer.default_root_dir",
        str(out), "--trainer.logger.init_args.save_dir", str(out),
    ]  # fmt: skip
    main([*common, *_folder_args(images)])
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    assert Path("digits_ncl/version_0/config.yaml") in before
    _damage(images, first=False)
    with pytest.raises(SystemExit) as exit_info:
        main([*common, *_folder_args(images)])
    assert exit_info.value.code == 2
    assert "cannot identify image file" in capsys.readouterr().err
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before
    for path in sorted((images / "train" / CLASSES[0]).glob("*.png"))[1:]:
        path.unlink()  # the damaged ones: the next run trains, as version_1
    main([*common, *_folder_args(images)])
    assert (out / "digits_ncl" / "version_1" / "config.yaml").is_file()


def test_a_run_stopped_by_a_fault_keeps_its_folder(tmp_path: Path) -> None:
    """A non-finite gradient at step 0 saves ``last-finite.ckpt``: the folder stays."""
    out = tmp_path / "out"
    with pytest.raises(SystemExit):
        main([
            "fit", "--config", str(DEMO / "digits_ncl.yaml"), "--trainer.default_root_dir",
            str(out), "--trainer.logger.init_args.save_dir", str(out), "--trainer.max_steps",
            "2", "--trainer.enable_progress_bar", "false", "--trainer.callbacks+",
            "tests.methods.test_skip_every_batch.PoisonEvery",
        ])  # fmt: skip
    assert next(out.rglob("last-finite.ckpt")).is_file()
    assert next(out.rglob("config.yaml")).is_file()
