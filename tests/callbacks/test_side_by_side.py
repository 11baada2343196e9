"""``side_by_side``: pictures next to each other or stacked, each under its title band."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from ncl_lightning.plot.pictures import PAD, side_by_side


def _picture(path: Path, size: tuple[int, int], colour: tuple[int, int, int]) -> Path:
    Image.new("RGB", size, colour).save(path)
    return path


@pytest.mark.parametrize("vertical", [False, True])
def test_every_picture_is_pasted_whole_below_its_title_band(tmp_path: Path, vertical: bool):
    red = _picture(tmp_path / "a.png", (30, 20), (255, 0, 0))
    blue = _picture(tmp_path / "b.png", (50, 10), (0, 0, 255))
    out = side_by_side([red, blue], ["A", "B"], tmp_path / "out.png", vertical=vertical)
    canvas = np.asarray(Image.open(out).convert("RGB"))
    band = 20
    if vertical:  # one below the other: widest picture + margins, heights + bands summed
        assert canvas.shape[:2] == (20 + 10 + 2 * band + 3 * PAD, 50 + 2 * PAD)
        places = [(PAD + band, PAD), (PAD + band + 20 + PAD + band, PAD)]
    else:
        assert canvas.shape[:2] == (20 + band + PAD, 30 + 50 + 3 * PAD)
        places = [(band, PAD), (band, PAD + 30 + PAD)]
    for (top, left), (w, h), colour in zip(
        places, [(30, 20), (50, 10)], [(255, 0, 0), (0, 0, 255)], strict=True
    ):
        assert (canvas[top : top + h, left : left + w] == colour).all()
    assert (canvas == (255, 0, 0)).all(-1).sum() == 30 * 20  # nothing pasted twice
