"""Atlas strips are legible anywhere: small images (8x8 digits) stored nearest-neighbour
upscaled (blocks of equal pixels, no blur) to a card's size, grey ones with one channel."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from ncl_lightning.atlas.images import CARD_SIDE, strip, upscale, upscale_factor, write_strips
from ncl_lightning.foundation.errors import ConfigError
from tests.conftest import ROOT


def _digits(count: int, side: int = 8) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    grey = rng.integers(0, 256, (count, side, side, 1), dtype=np.uint8)
    return list(np.repeat(grey, 3, axis=-1))  # what ImageReader gives: grey as RGB


def test_card_side_is_the_page_card_cell() -> None:
    cards = (ROOT / "ncl_lightning" / "atlas" / "static" / "cards.js").read_text()
    assert int(re.search(r"const CARD_CELL = (\d+);", cards).group(1)) == CARD_SIDE


@pytest.mark.parametrize(
    ("side", "factor"), [(8, 5), (16, 2), (20, 2), (21, 1), (32, 1), (40, 1), (224, 1)]
)
def test_upscale_factor_reaches_the_card_without_passing_it(side: int, factor: int) -> None:
    assert upscale_factor(side, side) == factor
    assert side * factor <= max(CARD_SIDE, side)
    assert upscale_factor(8, 16) == 2  # the longer side decides


def test_upscaled_pixels_are_constant_blocks() -> None:
    image = _digits(1)[0]
    big = upscale(image, 5)
    assert big.shape == (40, 40, 3)
    for y in range(40):  # slow obvious reference: every pixel is its source pixel
        for x in range(40):
            assert (big[y, x] == image[y // 5, x // 5]).all()


def test_grey_strip_is_one_channel_and_nearest_upscaled() -> None:
    images = _digits(4)
    picture = strip(images, upscale_factor(8, 8))
    assert picture.mode == "L" and picture.size == (4 * 40, 40)
    pixels = np.asarray(picture)
    blocks = pixels.reshape(8, 5, 4 * 8, 5)  # [row, dy, column, dx]
    assert (blocks == blocks[:, :1, :, :1]).all()  # each 5x5 block one value
    assert (blocks[:, 0, :, 0] == np.concatenate([im[..., 0] for im in images], axis=1)).all()
    colour = np.zeros((8, 8, 3), np.uint8)
    colour[..., 0] = 255
    assert strip([colour], 2).mode == "RGB"  # colour images keep their channels


@pytest.mark.parametrize("ext", ["png", "jpeg", "webp"])
def test_written_strips_have_the_upscaled_size(tmp_path: Path, ext: str) -> None:
    images = _digits(6)
    tops = [[0, 1, 2], [], [5, 4]]
    written = write_strips(tmp_path, "m0", tops, lambda i: images[i], ext, scale=5)
    assert [p.name for p in written] == [f"0.{ext}", f"2.{ext}"]
    for path, top in zip(written, [tops[0], tops[2]], strict=True):
        with Image.open(path) as im:
            assert im.size == (40 * len(top), 40)
    with Image.open(written[0]) as im:  # lossless: exact blocks of the source pixels
        if ext == "png":
            assert (np.asarray(im)[::5, :40:5] == images[0][..., 0]).all()


def test_a_bad_scale_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="scale"):
        write_strips(tmp_path, "m0", [[0]], lambda i: _digits(1)[0], "png", scale=0)
