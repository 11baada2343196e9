"""Every ``ncl-cli fit`` command of ``docs/own-data.md`` runs as written on generated
folders (its placeholders replaced), with ``configs/overlays/smoke.yaml`` added where the page does
not add it itself: the labelled and unlabelled folder, the small-image config, a subset of
ImageNet classes, the smoke check (the first command with the overlay, run once)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from PIL import Image

from ncl_lightning.runtime.cli import cli_main
from tests.conftest import ROOT

PAGE = ROOT / "docs" / "own-data.md"
SMOKE = "configs/overlays/smoke.yaml"
WNIDS = ("n01440764", "n01443537", "n01484850")


def page_commands() -> list[list[str]]:
    """The page's ``ncl-cli fit`` commands as argument lists (after ``ncl-cli fit``)."""
    blocks = re.findall(r"```bash\n(.*?)```", PAGE.read_text(), flags=re.S)
    commands = []
    for block in blocks:
        text = block.replace("\\\n", " ")
        commands += [shlex.split(line)[2:] for line in text.splitlines()
                     if line.startswith("ncl-cli fit")]  # fmt: skip
    return commands


def _images(folder: Path, n: int, tint: int) -> None:
    folder.mkdir(parents=True)
    for j in range(n):
        Image.new("RGB", (48, 40), (20 * j, tint, 90)).save(folder / f"{j:04d}.jpg")


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, str]:
    """The placeholders of the page -> generated folders and files."""
    tmp = tmp_path_factory.mktemp("own_data")
    for split in ("train", "val"):
        for i, name in enumerate(("cat", "dog")):
            _images(tmp / "labelled" / split / name, 8, 60 * i)
        _images(tmp / "unlabelled" / split, 16, 30)
        for i, wnid in enumerate(WNIDS):
            _images(tmp / "imagenet" / split / wnid, 4, 50 * i)
    (tmp / "classes.txt").write_text("# my three classes\n" + "\n".join(WNIDS) + "\n")
    return {"/path/to/my_images": str(tmp / "labelled"),
            "/path/to/my_unlabelled_images": str(tmp / "unlabelled"),
            "/path/to/imagenet": str(tmp / "imagenet"),
            "my_classes.txt": str(tmp / "classes.txt")}  # fmt: skip


def test_the_page_has_each_case() -> None:
    joined = [" ".join(c) for c in page_commands()]
    assert len(joined) == 5, joined
    assert sum("/path/to/my_images" in c for c in joined) == 3
    assert sum("my_unlabelled_images" in c for c in joined) == 1
    assert sum("class_list my_classes.txt" in c for c in joined) == 1
    assert sum(SMOKE in c for c in joined) == 1


def smoke_runs() -> list[list[str]]:
    """The page's commands with the smoke overlay after their config (where they lack it),
    each once: the page's smoke check is its first command with the overlay."""
    runs: list[list[str]] = []
    for command in page_commands():
        args = list(command)
        if SMOKE not in args:  # after the page's config, before the page's overrides
            args[2:2] = ["--config", SMOKE]
        if args not in runs:
            runs.append(args)
    return runs


def test_the_smoke_check_is_the_first_command_with_the_overlay() -> None:
    assert len(smoke_runs()) == 4


@pytest.mark.slow
@pytest.mark.parametrize("index", range(4))
def test_each_command_of_the_page_runs(index: int, folders: dict[str, str], tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.chdir(ROOT)  # the page's commands run from the repository's root
    command = smoke_runs()[index]
    args = [folders.get(a, a) for a in command]
    runs = str(tmp_path / "runs")
    args += ["--trainer.default_root_dir", runs, "--trainer.logger.init_args.save_dir", runs,
             "--trainer.enable_progress_bar", "false"]  # fmt: skip
    cli = cli_main(["fit", *args])
    assert cli.trainer.global_step >= 1
    assert list(Path(runs).glob("smoke/version_0/checkpoints/last.ckpt"))
    expected = {"my_unlabelled_images": 0, "imagenet": 3, "my_images": 2}
    root = next(a for a in command if a.startswith("/path/to/"))
    assert cli.datamodule.num_classes == expected[root.rpartition("/")[2]]
