"""``side_by_side``: pictures next to each other or stacked, each under its title, in the
package's figure style, pixel for pixel in the PNG, with PDF and SVG beside it when asked."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.plot.pictures import PAD, TITLE_BAND, side_by_side, side_by_side_size


def _picture(path: Path, size: tuple[int, int], seed: int) -> tuple[Path, np.ndarray]:
    pixels = np.random.default_rng(seed).integers(0, 256, (size[1], size[0], 3), np.uint8)
    Image.fromarray(pixels).save(path)
    return path, pixels


@pytest.mark.parametrize("vertical", [False, True])
def test_every_picture_is_drawn_whole_below_its_title(tmp_path: Path, vertical: bool):
    (a, red), (b, blue) = _picture(tmp_path / "a.png", (30, 20), 0), _picture(
        tmp_path / "b.png", (50, 10), 1)  # fmt: skip
    out = side_by_side([a, b], ["A", "B"], tmp_path / "out.png", vertical=vertical)
    assert out == tmp_path / "out.png" and sorted(p.name for p in tmp_path.glob("out.*")) == [
        "out.png"]  # fmt: skip
    canvas = np.asarray(Image.open(out).convert("RGB"))
    band = TITLE_BAND
    # by hand: one below the other: widest picture + margins, heights + bands summed;
    # in a row: widths + margins, tallest picture + band
    if vertical:
        assert canvas.shape[:2] == (20 + 10 + 2 * band + 3 * PAD, 50 + 2 * PAD)
        places = [(PAD + band, PAD), (PAD + band + 20 + PAD + band, PAD)]
    else:
        assert canvas.shape[:2] == (20 + band + PAD, 30 + 50 + 3 * PAD)
        places = [(band, PAD), (band, PAD + 30 + PAD)]
    assert side_by_side_size([(30, 20), (50, 10)], vertical)[::-1] == canvas.shape[:2]
    for (top, left), pixels in zip(places, [red, blue], strict=True):
        h, w = pixels.shape[:2]
        assert np.array_equal(canvas[top : top + h, left : left + w], pixels)  # pixel for pixel
        title = canvas[max(top - band, 0) : top, left : left + w]
        assert (title < 128).all(-1).sum() > 10  # dark title text above each picture


def test_vector_files_beside_the_png_keep_the_titles_as_text(tmp_path: Path) -> None:
    a, _ = _picture(tmp_path / "a.png", (40, 40), 0)
    b, _ = _picture(tmp_path / "b.png", (40, 40), 1)
    name = tmp_path / "top_activations_ncl_vs_bayesncl.png"  # the demo's name
    out = side_by_side([a, b], ["NCL", "BayesNCL"], name, formats=("png", "pdf", "svg"))
    assert out.name == "top_activations_ncl_vs_bayesncl.png"
    assert {p.suffix for p in tmp_path.glob("top_activations_*")} == {".png", ".pdf", ".svg"}
    svg = out.with_suffix(".svg").read_text()
    assert re.search(r"<text[^>]*>NCL</text>", svg) and ">BayesNCL</text>" in svg
    assert "DejaVu Sans" in svg  # the package's figure style, not PIL's bitmap font
    assert out.with_suffix(".pdf").read_bytes().startswith(b"%PDF")


@pytest.mark.parametrize(
    ("titles", "formats", "match"),
    [(["A"], ("png",), r"^titles must have shape \[2\], got \(1,\)"),
     (["A", "B"], ("png", "jpg"), r"^formats must be one of 'png', 'pdf', 'svg', got 'jpg'"),
     (["A", "B"], "pdf", r"^formats: give a list of formats")],
)  # fmt: skip
def test_bad_arguments_are_one_line_before_anything_is_written(
    tmp_path: Path, titles: list[str], formats, match: str
) -> None:
    a, _ = _picture(tmp_path / "a.png", (4, 4), 0)
    with pytest.raises(ConfigError, match=match):
        side_by_side([a, a], titles, tmp_path / "out.png", formats=formats)
    with pytest.raises(ConfigError, match=r"^len\(paths\) must be an integer >= 1, got 0"):
        side_by_side([], [], tmp_path / "out.png")
    assert not list(tmp_path.glob("out.*"))
