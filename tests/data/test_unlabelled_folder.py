"""Issue 33, finding 11a: a folder of unlabelled images (no class folders, or one) trains a
self-supervised method, with the class metrics off and one notice; it used to fail with
``num_classes ... larger than 1`` (a key the user never set)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ncl_lightning.data import ImageFolderDataModule
from ncl_lightning.foundation.errors import DataNotFoundError
from ncl_lightning.runtime.cli import cli_main
from tests.helpers.cli import DEMO


def _layout(cifar_subset: Path, root: Path, one_class: bool) -> Path:
    """12 training and 4 validation images, flat or in one class folder ``all``."""
    for split, n in (("train", 12), ("val", 4)):
        folder = root / split / ("all" if one_class else "")
        folder.mkdir(parents=True)
        for name in ("airplane", "cat"):
            for image in sorted((cifar_subset / split / name).glob("*.png"))[: n // 2]:
                shutil.copy2(image, folder / f"{name}-{image.name}")
    return root


@pytest.mark.parametrize("one_class", [False, True], ids=["flat", "one-class"])
def test_unlabelled_images_train_without_class_metrics(
    cifar_subset: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture, one_class: bool
) -> None:
    root = _layout(cifar_subset, tmp_path / "images", one_class)
    out = tmp_path / "out"
    cli = cli_main([
        "fit", "--config", str(DEMO / "digits_ncl.yaml"), "--trainer.default_root_dir", str(out),
        "--trainer.logger.init_args.save_dir", str(out), "--trainer.max_epochs", "1",
        "--trainer.check_val_every_n_epoch", "1", "--trainer.enable_progress_bar", "false",
        "--data", "ncl_lightning.data.ImageFolderDataModule", "--data.init_args.root", str(root),
        "--data.init_args.batch_size", "4", "--data.init_args.num_workers", "0",
        "--model.init_args.backbone.init_args.in_channels", "3",
    ])  # fmt: skip
    assert cli.datamodule.num_classes == 0 and cli.model.online is None
    assert cli.trainer.global_step == 3
    layout = "one class folder (all)" if one_class else "images, no class folders"
    notices = [
        r.getMessage() for r in caplog.records if "training without labels" in r.getMessage()
    ]
    assert notices == [
        f"ImageFolderDataModule: {root / 'train'} holds {layout}: training without labels "
        "(num_classes 0: the online probe, the kNN monitor and the class metrics are off)"
    ]
    header = next(out.rglob("metrics.csv")).read_text().splitlines()[0]
    assert "val/z/sparsity" in header and "knn" not in header and "probe" not in header


def test_an_empty_training_folder_is_still_refused(tmp_path: Path) -> None:
    (tmp_path / "train").mkdir()
    with pytest.raises(DataNotFoundError, match="no class folders and no images in"):
        ImageFolderDataModule(root=str(tmp_path))


def test_two_classes_stay_labelled(cifar_subset: Path) -> None:
    assert ImageFolderDataModule(root=str(cifar_subset)).num_classes == 10
