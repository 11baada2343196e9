"""``python -m ncl_lightning.atlas`` on bad input: one line ``python -m ncl_lightning.atlas:
error: <key or path>: <problem>``, exit status 2, no traceback, nothing written, before any
model runs. Damaged checkpoints are named by what is wrong in them (the validator of
``runtime/checkpoint_check.py``, which the atlas reaches through ``load_method``)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ncl_lightning.atlas.__main__ import PROG, main
from ncl_lightning.checkpoints.record import RECORD_KEY
from tests.conftest import ROOT
from tests.helpers.tools import listing, refused

DIGITS = ROOT / "configs" / "demo" / "digits_ncl.yaml"
ATLAS_SOURCES = ROOT / "ncl_lightning" / "atlas"


def rgb_folder(root: Path, size: int = 16, per_class: int = 6) -> Path:
    """An image folder ``train/val/test`` with two classes of small RGB PNGs."""
    from PIL import Image

    rng = torch.Generator().manual_seed(0)
    for split in ("train", "val", "test"):
        for label in ("a", "b"):
            folder = root / split / label
            folder.mkdir(parents=True)
            for i in range(per_class):
                pixels = torch.randint(0, 256, (size, size, 3), generator=rng, dtype=torch.uint8)
                Image.fromarray(pixels.numpy()).save(folder / f"{i}.png")
    return root


def data_config(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """A folder holding a file ``afile`` (for outputs that are files)."""
    (tmp_path / "afile").write_text("not a folder")
    return tmp_path


def atlas_refused(argv: list[str], folder: Path, capsys: pytest.CaptureFixture) -> str:
    return refused(main, argv, PROG, folder, capsys)


# -- arguments, output folder, accelerator, data config: no checkpoint is read -------------
@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--space", "q"], "--space: invalid choice: 'q' (choose from 'z', 'h')"),
        (["--images-per-dim", "0"], "--images-per-dim: must be an integer >= 1, got 0"),
        (["--card-images", "two"], "--card-images: expected an integer >= 1, got 'two'"),
        (["--eps", "nan"], "--eps: must be >= 0, got nan"),
        (["--image-format", "gif"], "--image-format: invalid choice: 'gif'"),
        (["--bogus"], "unrecognized arguments: --bogus"),
        (["--names", "a", "b"], "--names: 2 names for 1 checkpoints"),
        (
            ["--accelerator", "tpuu"],
            "--accelerator: You selected an invalid accelerator name: `accelerator='tpuu'`",
        ),
        (["--accelerator", "tpu"], "--accelerator: Requirement 'torch_xla"),
    ],
)
def test_bad_arguments(
    work: Path, capsys: pytest.CaptureFixture, args: list[str], expected: str
) -> None:
    argv = [str(work / "m.ckpt"), "--config", str(DIGITS), "--out", str(work / "atlas"), *args]
    assert expected in atlas_refused(argv, work, capsys)


def test_output_folder_that_is_a_file_or_cannot_be_made(
    work: Path, capsys: pytest.CaptureFixture
) -> None:
    common = [str(work / "m.ckpt"), "--config", str(DIGITS), "--out"]
    afile = work / "afile"
    assert atlas_refused([*common, str(afile)], work, capsys) == (
        f"--out: {afile} is a file, not a folder"
    )
    message = atlas_refused([*common, str(afile / "atlas")], work, capsys)
    assert message == f"--out: {afile / 'atlas'}: {afile} is a file, not a folder"
    if Path("/proc").is_dir():  # a folder no one can create entries in (even root)
        message = atlas_refused([*common, "/proc/ncl-atlas"], work, capsys)
        assert message.startswith("--out: /proc/ncl-atlas: cannot create folders in /proc")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "data:\n  class_path: ImageFolderDataModule\n  init_args: {root: {nowhere}, "
            "batch_size: 4}\n",
            "data folder not found: {nowhere}",
        ),
        (
            "data: {class_path: DigitsDataModul}\n",
            "DigitsDataModul",
        ),
        (
            "data: {class_path: DigitsDataModule, init_args: {batch_sise: 4}}\n",
            "batch_sise",
        ),
        (
            "data: {class_path: DigitsDataModule, init_args: {batch_size: 0}}\n",
            "batch_size must be an integer >= 1, got 0",
        ),
        (
            "data: {class_path: DigitsDataModule, init_args: {batch_size: abc}}\n",
            "abc",
        ),
        ("trainer: {max_epochs: 1}\n", "no data section with a class_path"),
    ],
)
def test_bad_data_config_names_the_file_and_the_key(
    work: Path, capsys: pytest.CaptureFixture, text: str, expected: str
) -> None:
    nowhere = str(work / "nowhere")
    config = data_config(work / "data.yaml", text.replace("{nowhere}", nowhere))
    argv = [str(work / "m.ckpt"), "--config", str(config), "--out", str(work / "atlas")]
    message = atlas_refused(argv, work, capsys)
    assert message.startswith(f"{config}: ") and expected.replace("{nowhere}", nowhere) in message


def test_a_test_split_the_data_cannot_read(work: Path, capsys: pytest.CaptureFixture) -> None:
    """The atlas reads the test split: its folders are checked before any model runs."""
    root = rgb_folder(work / "images", per_class=1)
    shutil.rmtree(root / "test" / "b")
    (root / "test" / "b").mkdir()  # an empty class folder
    config = data_config(
        work / "data.yaml",
        f"data:\n  class_path: ImageFolderDataModule\n  init_args: {{root: {root}, "
        "test_dir: test, batch_size: 1}\n",
    )
    argv = [str(work / "m.ckpt"), "--config", str(config), "--out", str(work / "atlas")]
    message = atlas_refused(argv, work, capsys)
    assert message.startswith(f"{config}: ") and "empty class folder: " in message
    assert str(root / "test" / "b") in message


def test_missing_config_and_missing_checkpoint(work: Path, capsys: pytest.CaptureFixture) -> None:
    out = ["--out", str(work / "atlas")]
    nope = work / "nope.yaml"
    message = atlas_refused([str(work / "m.ckpt"), "--config", str(nope), *out], work, capsys)
    assert message.startswith(f"{nope}: ")
    message = atlas_refused([str(work / "m.ckpt"), *out], work, capsys)  # no run config
    assert message.startswith(f"--config: no config.yaml beside {work / 'm.ckpt'}")
    message = atlas_refused([str(work / "m.ckpt"), "--config", str(DIGITS), *out], work, capsys)
    assert message == f"checkpoint not found: {work / 'm.ckpt'}"
    export = work / "export"  # a folder that exists is not "not found"
    export.mkdir()
    (export / "config.json").write_text("{}")
    message = atlas_refused([str(export), "--config", str(DIGITS), *out], work, capsys)
    assert message == f"{export} is a folder (an exported backbone), not a checkpoint file (.ckpt)"


def test_a_page_of_the_users_in_out_is_never_replaced(
    work: Path, capsys: pytest.CaptureFixture
) -> None:
    page = work / "site" / "index.html"
    page.parent.mkdir()
    page.write_text("<html>my page</html>")
    argv = [str(work / "m.ckpt"), "--config", str(DIGITS), "--out", str(page.parent)]
    message = atlas_refused(argv, work, capsys)
    assert message == f"--out: {page} exists and is not an atlas page; choose a new or empty folder"
    assert page.read_text() == "<html>my page</html>"


def test_the_atlas_reads_checkpoints_only_through_runtime_checkpoint() -> None:
    """One reader validates every checkpoint (structure, trusted classes): no module of
    the atlas unpickles a file itself."""
    for source in ATLAS_SOURCES.glob("*.py"):
        text = source.read_text()
        assert not re.search(r"\btorch\.load\b|\bpickle\b", text), source


# -- with real checkpoints (two short ncl-cli fits) ---------------------------------------
@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``gray``: NCL on digits (1 channel); ``rgb``: NCL on a small RGB image folder
    (3 channels); two training steps each, width 8 (~5 s each)."""
    from ncl_lightning.runtime.cli import cli_main

    root = tmp_path_factory.mktemp("atlas_inputs")
    images = rgb_folder(root / "images")
    runs = {
        "gray": [],
        "rgb": ["--data", "ImageFolderDataModule", "--data.init_args.root", str(images),
                "--data.init_args.batch_size", "4", "--data.init_args.image_size", "16",
                "--model.init_args.backbone.init_args.in_channels", "3"],
    }  # fmt: skip
    found = {}
    for name, extra in runs.items():
        out = root / name
        cli_main([
            "fit", "--config", str(DIGITS), *extra, "--trainer.max_steps", "2",
            "--trainer.limit_val_batches", "0", "--trainer.enable_progress_bar", "false",
            "--trainer.default_root_dir", str(out), "--trainer.logger.init_args.save_dir",
            str(out), "--model.init_args.backbone.init_args.width", "8",
        ])  # fmt: skip
        found[name] = next(out.rglob("last.ckpt"))
    found["images"] = images
    return found


@pytest.mark.slow
def test_data_that_does_not_fit_the_model_input_channels(
    checkpoints: dict[str, Path], work: Path, capsys: pytest.CaptureFixture
) -> None:
    rgb_data = data_config(
        work / "rgb.yaml",
        f"data:\n  class_path: ImageFolderDataModule\n  init_args:\n    root: "
        f"{checkpoints['images']}\n    batch_size: 4\n    image_size: 16\n",
    )
    out = ["--out", str(work / "atlas")]
    gray, rgb = checkpoints["gray"], checkpoints["rgb"]
    message = atlas_refused([str(rgb), "--config", str(DIGITS), *out], work, capsys)
    assert message == (
        f"{rgb}: model does not fit the data: the backbone expects 3 input channel(s), the "
        f"data has 1 ({DIGITS})"
    )
    message = atlas_refused([str(gray), "--config", str(rgb_data), *out], work, capsys)
    assert message == (
        f"{gray}: model does not fit the data: the backbone expects 1 input channel(s), the "
        f"data has 3 ({rgb_data})"
    )
    # two models: the second one's mismatch is found before the first one runs
    message = atlas_refused([str(gray), str(rgb), "--config", str(DIGITS), *out], work, capsys)
    assert message.startswith(f"{rgb}: model does not fit the data")


def _damaged(source: Path, folder: Path) -> dict[str, tuple[Path, str]]:
    """Copies of a real checkpoint, each damaged in one way -> (file, what the line names)."""
    ckpt = torch.load(source, map_location="cpu", weights_only=True)
    record = ckpt[RECORD_KEY]
    cases = {
        "list": ([ckpt], "list"),
        "state_dict_list": ({**ckpt, "state_dict": list(ckpt["state_dict"].values())},
                            "'state_dict'"),
        "record_string": ({**ckpt, RECORD_KEY: record["method"]}, f"'{RECORD_KEY}'"),
        "no_state_dict": ({k: v for k, v in ckpt.items() if k != "state_dict"}, "'state_dict'"),
        "hyper_parameters_none": ({**ckpt, "hyper_parameters": None}, "'hyper_parameters'"),
        "backbone_list": ({**ckpt, RECORD_KEY: {**record, "backbone": ["SmallCNN"]}},
                          f"'{RECORD_KEY}.backbone'"),
    }  # fmt: skip
    damaged = {}
    for name, (content, named) in cases.items():
        torch.save(content, folder / f"{name}.ckpt")
        damaged[name] = (folder / f"{name}.ckpt", named)
    truncated = folder / "truncated.ckpt"
    data = source.read_bytes()
    truncated.write_bytes(data[: len(data) // 2])
    damaged["truncated"] = (truncated, "cannot read checkpoint")
    return damaged


@pytest.mark.slow
def test_damaged_checkpoints_are_one_line_naming_what_is_wrong(
    checkpoints: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    bad = tmp_path / "bad"
    bad.mkdir()
    for name, (path, named) in _damaged(checkpoints["gray"], bad).items():
        argv = [str(path), "--config", str(DIGITS), "--out", str(tmp_path / "atlas")]
        message = atlas_refused(argv, tmp_path, capsys)
        assert str(path) in message and named in message, (name, message)
        assert "Error" not in message, (name, message)  # no exception class or repr


@pytest.mark.slow
def test_as_a_process_one_line_and_nothing_written(
    checkpoints: dict[str, Path], tmp_path: Path
) -> None:
    """The real command: a damaged checkpoint after a good one, exit 2, no traceback."""
    path = tmp_path / "hp_none.ckpt"
    ckpt = torch.load(checkpoints["gray"], map_location="cpu", weights_only=True)
    torch.save({**ckpt, "hyper_parameters": None}, path)
    out = tmp_path / "atlas"
    env = {k: v for k, v in os.environ.items() if k != "NCL_TRACEBACK"}
    done = subprocess.run(
        [sys.executable, "-m", "ncl_lightning.atlas", str(checkpoints["gray"]), str(path),
         "--config", str(DIGITS), "--out", str(out)],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        f"{PROG}: error: {path}: damaged checkpoint: 'hyper_parameters' is null, expected a "
        "mapping of the module's arguments"
    ], done.stderr
    assert done.stdout == "" and not out.exists()
    assert listing(tmp_path) == ["hp_none.ckpt"]
