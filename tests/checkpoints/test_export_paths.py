"""An export published from a real run carries none of the machine's paths (issue 47):
the data root and class list of the run, its run folder and the working directory appear
in no exported file; the card says where a path was elided."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from PIL import Image

from ncl_lightning.checkpoints.card import plain
from ncl_lightning.export import main as export_main
from ncl_lightning.runtime.cli import main as cli_main

WNIDS = ("n01440764", "n01443537", "n01484850")


def _imagenet_subset(home: Path) -> tuple[Path, Path]:
    """A 3-class ImageNet-style tree of tiny images and its class list, under ``home``."""
    root = home / "datasets" / "imagenet100"
    for split in ("train", "val"):
        for i, wnid in enumerate(WNIDS):
            (root / split / wnid).mkdir(parents=True)
            for j in range(2):
                Image.new("RGB", (16, 16), (40 * i, 30 * j, 90)).save(
                    root / split / wnid / f"{j}.png"
                )
    class_list = home / "datasets" / "my_classes.txt"
    class_list.write_text("\n".join(WNIDS) + "\n")
    return root, class_list


@pytest.mark.slow
def test_no_exported_file_holds_a_path_of_the_run(tmp_path: Path, monkeypatch) -> None:
    home = tmp_path / "home" / "alice"
    root, class_list = _imagenet_subset(home)
    runs = home / "runs"
    monkeypatch.chdir(tmp_path)
    cli_main([
        "fit", "--config", str(Path(__file__).parents[2] / "configs/demo/digits_ncl.yaml"),
        "--data", "ncl_lightning.data.ImageNet100DataModule",
        "--data.init_args.root", str(root), "--data.init_args.class_list", str(class_list),
        "--data.init_args.batch_size", "3", "--data.init_args.num_workers", "0",
        "--model.init_args.backbone.init_args.in_channels", "3",
        "--trainer.max_epochs", "1", "--trainer.limit_train_batches", "1",
        "--trainer.enable_progress_bar", "false",
        "--trainer.default_root_dir", str(runs), "--trainer.logger.init_args.save_dir", str(runs),
    ])  # fmt: skip
    (ckpt,) = runs.glob("*/version_0/checkpoints/last.ckpt")
    out = export_main([str(ckpt), str(tmp_path / "export")])
    files = sorted(p for p in out.rglob("*") if p.is_file())
    assert {p.name for p in files} >= {"README.md", "config.json", "model.safetensors"}
    secrets = [str(tmp_path), str(home), str(root), str(class_list), os.getcwd()]
    for file in files:
        content = file.read_bytes().decode("utf-8", errors="replace")
        leaked = [s for s in secrets if s in content]
        assert not leaked, f"{file.name} holds {leaked}"
    card = (out / "README.md").read_text()
    hparams = yaml.safe_load(card.split("```yaml\n", 1)[1].split("```", 1)[0])
    data = hparams["data"]
    assert data["root"] == "<absolute path on the training machine: imagenet100>"
    assert data["class_list"] == "<absolute path on the training machine: my_classes.txt>"
    assert data["batch_size"] == 3  # everything else as it was


def test_plain_elides_absolute_paths_only() -> None:
    got = plain({"root": "/home/alice/data", "rel": "data/cifar", "n": 3, "none": None,
                 "nested": {"files": ["/srv/a.txt", "b.txt"]}, "home": "~/x",
                 "windows": "C:\\Users\\alice\\data", "text": "a / b"})  # fmt: skip
    assert got == {
        "root": "<absolute path on the training machine: data>", "rel": "data/cifar", "n": 3,
        "none": None, "nested": {"files": ["<absolute path on the training machine: a.txt>",
                                           "b.txt"]},
        "home": "<absolute path on the training machine: x>",
        "windows": "<absolute path on the training machine: data>", "text": "a / b",
    }  # fmt: skip
