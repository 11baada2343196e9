"""An export's ``config.json`` carries the training run's evaluation transform, and timm
rebuilds it from the exported folder alone (issue 47): ``timm.create_model("local-dir:...")``
then ``resolve_data_config`` / ``create_transform`` give the same tensors as the
DataModule's own evaluation transform."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from PIL import Image

from ncl_lightning.checkpoints.export import crop_fraction
from ncl_lightning.data import ImageFolderDataModule
from ncl_lightning.export import main as export_main
from ncl_lightning.runtime.cli import main as cli_main
from tests.conftest import ROOT


def _folder(root: Path) -> Path:
    for split in ("train", "val"):
        for i, name in enumerate(("cat", "dog")):
            (root / split / name).mkdir(parents=True)
            for j in range(8):
                Image.new("RGB", (150, 110), (30 * j, 100 * i, 60)).save(
                    root / split / name / f"{j}.jpg"
                )
    return root


def _photo(seed: int = 0) -> Image.Image:
    """A non-square image with detail at every scale (resizing it is not trivial)."""
    g = torch.Generator().manual_seed(seed)
    pixels = (torch.rand(173, 241, 3, generator=g) * 255).to(torch.uint8).numpy()
    return Image.fromarray(pixels)


@pytest.mark.slow
@pytest.mark.parametrize("image_size", [96, 32])
def test_timm_preprocesses_an_export_as_our_evaluation_does(
    image_size: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    timm = pytest.importorskip("timm")
    root = _folder(tmp_path / "images")
    runs = tmp_path / "runs"
    monkeypatch.chdir(ROOT)
    data = [
        "--data",
        "ncl_lightning.data.ImageFolderDataModule",
        "--data.init_args.root",
        str(root),
        "--data.init_args.image_size",
        str(image_size),
    ]
    smoke = "configs/overlays/smoke.yaml"
    cli_main(["fit", "--config", "configs/imagenet100_ncl.yaml", "--config", smoke,
              *data, "--trainer.default_root_dir", str(runs),
              "--trainer.logger.init_args.save_dir", str(runs),
              "--trainer.enable_progress_bar", "false"])  # fmt: skip
    (ckpt,) = runs.glob("*/version_0/checkpoints/last.ckpt")
    out = export_main([str(ckpt), str(tmp_path / "export")])
    config = json.loads((out / "config.json").read_text())
    ours = ImageFolderDataModule(root=str(root), image_size=image_size)
    assert config["preprocessing"]["resize"] == ours.eval_resize  # 110 at 96 px, none at 32
    assert config["pretrained_cfg"]["input_size"] == [3, image_size, image_size]
    net = timm.create_model(f"local-dir:{out}", pretrained=True)  # no network
    transform = timm.data.create_transform(**timm.data.resolve_data_config({}, model=net))
    expected = ours.augmentation.clean(resize=ours.eval_resize)
    for seed in range(3):
        image = _photo(seed)
        theirs, mine = transform(image), expected(image)
        assert theirs.shape == mine.shape == (3, image_size, image_size)
        torch.testing.assert_close(theirs, mine, rtol=0, atol=1e-6)
    assert "timm.data.resolve_data_config" in (out / "README.md").read_text()


def test_crop_fraction_gives_timm_the_resize() -> None:
    """timm resizes to ``floor(crop / crop_pct)``: every crop and resize comes back."""
    for crop in range(8, 400):
        resize = round(crop * 256 / 224)
        assert math.floor(crop / crop_fraction(crop, resize)) == resize, crop
    assert crop_fraction(224, 256) == 0.875 and crop_fraction(32, None) == 1.0
