"""Every image mode PIL opens decodes to the right 8-bit values, or is refused by name.

Each case builds an image with known pixel values (a fixed numpy seed), saves it in a
format that keeps its mode (checked on reopening), reads it through
``ImageFolderDataModule`` (``cache: none`` gives the PIL image of ``read_image``,
``cache: memory`` the uint8 tensor of the decode pass) and compares with the values an
obvious formula written here gives. Regression: a 16-bit PNG used to decode to a nearly
constant white image.
"""

from __future__ import annotations

import colorsys
import struct
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from ncl_lightning.data import ImageFolderDataModule
from ncl_lightning.data.decode import read_image, to_8bit
from ncl_lightning.foundation.errors import CorruptImageError

SIZE = 16
RNG_SEED = 0


def _rng() -> np.random.Generator:
    return np.random.default_rng(RNG_SEED)


def _u8(shape: tuple[int, ...]) -> np.ndarray:
    return _rng().integers(0, 256, shape, dtype=np.uint8)


def _on_white(color: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """``round((c * a + 255 * (255 - a)) / 255)``, in float (the reference)."""
    c, a = color.astype(float), alpha.astype(float)[..., None]
    return np.floor((c * a + 255.0 * (255.0 - a)) / 255.0 + 0.5).astype(np.uint8)


def _gray(values: np.ndarray) -> np.ndarray:
    return np.repeat(values[..., None], 3, axis=2)


def _sixteen(values: np.ndarray) -> np.ndarray:
    return np.floor(values.astype(float) / 257.0 + 0.5).astype(np.uint8)


def _sixteen_values() -> np.ndarray:
    v = _rng().integers(0, 65536, (SIZE, SIZE)).astype(np.uint16)
    v.flat[:6] = [0, 65535, 128, 129, 32767, 256]  # ends and rounding edges
    return v


def _save(image: Image.Image, path: Path, fmt: str, mode: str, **kwargs) -> None:
    image.save(path, format=fmt, **kwargs)
    with Image.open(path) as reopened:
        assert reopened.mode == mode, f"{fmt} stored {image.mode} as {reopened.mode}"


def _png_rgb16(path: Path, values: np.ndarray) -> None:
    """A 48-bit RGB PNG written by hand (PIL cannot write one)."""
    h, w, _ = values.shape
    rows = b"".join(b"\x00" + values[y].astype(">u2").tobytes() for y in range(h))

    def chunk(tag: bytes, data: bytes) -> bytes:
        crc = struct.pack(">I", zlib.crc32(tag + data))
        return struct.pack(">I", len(data)) + tag + data + crc

    header = struct.pack(">IIBBBBB", w, h, 16, 2, 0, 0, 0)
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )  # fmt: skip


def _palette() -> tuple[list[int], np.ndarray, np.ndarray]:
    colors = _u8((256, 3))
    index = _rng().integers(0, 8, (SIZE, SIZE), dtype=np.uint8)
    return colors.flatten().tolist(), colors, index


# Each case writes its file into a folder and returns (expected RGB uint8 [H, W, 3], tol).
def case_1bit(path: Path) -> tuple[np.ndarray, int]:
    bits = _rng().integers(0, 2, (SIZE, SIZE)).astype(bool)
    _save(Image.fromarray(bits), path.with_suffix(".png"), "PNG", "1")
    return _gray(bits.astype(np.uint8) * 255), 0


def case_l(path: Path) -> tuple[np.ndarray, int]:
    values = _u8((SIZE, SIZE))
    _save(Image.fromarray(values), path.with_suffix(".png"), "PNG", "L")
    return _gray(values), 0


def case_l_color_key(path: Path) -> tuple[np.ndarray, int]:
    values = _u8((SIZE, SIZE))
    key = int(values[0, 0])
    _save(Image.fromarray(values), path.with_suffix(".png"), "PNG", "L", transparency=key)
    return _gray(np.where(values == key, 255, values).astype(np.uint8)), 0


def case_p(path: Path) -> tuple[np.ndarray, int]:
    flat, colors, index = _palette()
    image = Image.fromarray(index, mode="P")
    image.putpalette(flat)
    _save(image, path.with_suffix(".png"), "PNG", "P")
    return colors[index], 0


def case_p_alpha_table(path: Path) -> tuple[np.ndarray, int]:
    flat, colors, index = _palette()
    alphas = _u8((256,))
    alphas[0] = 0
    image = Image.fromarray(index, mode="P")
    image.putpalette(flat)
    _save(image, path.with_suffix(".png"), "PNG", "P", transparency=alphas.tobytes())
    return _on_white(colors[index], alphas[index]), 0


def gif_transparent_index(path: Path) -> tuple[np.ndarray, int]:
    flat, colors, index = _palette()
    image = Image.fromarray(index, mode="P")
    image.putpalette(flat)
    _save(image, path.with_suffix(".gif"), "GIF", "P", transparency=3)
    return np.where((index == 3)[..., None], 255, colors[index]).astype(np.uint8), 0


def case_pa(path: Path) -> tuple[np.ndarray, int]:
    flat, colors, index = _palette()
    alpha = _u8((SIZE, SIZE))
    image = Image.fromarray(np.stack([index, alpha], axis=2), mode="PA")
    image.putpalette(flat)
    _save(image, path.with_suffix(".tif"), "TIFF", "PA")
    return _on_white(colors[index], alpha), 0


def case_la(path: Path) -> tuple[np.ndarray, int]:
    values = _u8((SIZE, SIZE, 2))
    _save(Image.fromarray(values, mode="LA"), path.with_suffix(".png"), "PNG", "LA")
    return _gray(_on_white(values[..., :1], values[..., 1])[..., 0]), 0


def case_rgba(path: Path) -> tuple[np.ndarray, int]:
    values = _u8((SIZE, SIZE, 4))
    values[0, 0, 3], values[0, 1, 3] = 0, 255
    _save(Image.fromarray(values, mode="RGBA"), path.with_suffix(".png"), "PNG", "RGBA")
    return _on_white(values[..., :3], values[..., 3]), 0


def case_rgb_color_key(path: Path) -> tuple[np.ndarray, int]:
    values = _u8((SIZE, SIZE, 3))
    values[2, :] = (1, 2, 3)
    _save(Image.fromarray(values), path.with_suffix(".png"), "PNG", "RGB", transparency=(1, 2, 3))
    keyed = np.all(values == (1, 2, 3), axis=2)[..., None]
    return np.where(keyed, 255, values).astype(np.uint8), 0


def case_rgbx_tiff(path: Path) -> tuple[np.ndarray, int]:
    values = _u8((SIZE, SIZE, 4))
    _save(Image.fromarray(values, mode="RGBX"), path.with_suffix(".tif"), "TIFF", "RGB")
    return values[..., :3], 0


def case_i16_png(path: Path) -> tuple[np.ndarray, int]:
    values = _sixteen_values()
    _save(Image.fromarray(values), path.with_suffix(".png"), "PNG", "I;16")
    return _gray(_sixteen(values)), 0


def case_i16_tiff(path: Path) -> tuple[np.ndarray, int]:
    values = _sixteen_values()
    _save(Image.fromarray(values), path.with_suffix(".tif"), "TIFF", "I;16")
    return _gray(_sixteen(values)), 0


def case_i16b_tiff(path: Path) -> tuple[np.ndarray, int]:
    values = _sixteen_values()
    image = Image.frombytes("I;16B", (SIZE, SIZE), values.astype(">u2").tobytes())
    _save(image, path.with_suffix(".tif"), "TIFF", "I;16B")
    return _gray(_sixteen(values)), 0


def case_pgm_16bit(path: Path) -> tuple[np.ndarray, int]:
    values = _sixteen_values()
    path.with_suffix(".pgm").write_bytes(
        f"P5\n{SIZE} {SIZE}\n65535\n".encode() + values.astype(">u2").tobytes()
    )
    with Image.open(path.with_suffix(".pgm")) as image:
        assert image.mode == "I"
    return _gray(_sixteen(values)), 0


def case_rgb_48bit_png(path: Path) -> tuple[np.ndarray, int]:
    values = _rng().integers(0, 65536, (SIZE, SIZE, 3)).astype(np.uint16)
    _png_rgb16(path.with_suffix(".png"), values)
    return _sixteen(values), 1  # PIL keeps the high byte: v // 256, within 1 of v / 257


def case_cmyk_tiff(path: Path) -> tuple[np.ndarray, int]:
    cmyk = _u8((SIZE, SIZE, 4)).astype(float)
    image = Image.fromarray(cmyk.astype(np.uint8), mode="CMYK")
    _save(image, path.with_suffix(".tif"), "TIFF", "CMYK")
    rgb = (255.0 - cmyk[..., :3]) * (255.0 - cmyk[..., 3:]) / 255.0
    return np.floor(rgb + 0.5).astype(np.uint8), 1


def case_cmyk_jpeg(path: Path) -> tuple[np.ndarray, int]:
    cmyk = np.broadcast_to(np.array([200.0, 30.0, 100.0, 50.0]), (SIZE, SIZE, 4))
    image = Image.fromarray(cmyk.astype(np.uint8), mode="CMYK")
    _save(image, path.with_suffix(".jpg"), "JPEG", "CMYK", quality=95)
    rgb = (255.0 - cmyk[..., :3]) * (255.0 - cmyk[..., 3:]) / 255.0
    return np.floor(rgb + 0.5).astype(np.uint8), 3  # lossy, but a flat colour


def case_ycbcr_tiff(path: Path) -> tuple[np.ndarray, int]:
    ycc = _u8((SIZE, SIZE, 3))
    _save(Image.fromarray(ycc, mode="YCbCr"), path.with_suffix(".tif"), "TIFF", "YCbCr")
    y, cb, cr = (ycc[..., i].astype(float) for i in range(3))
    rgb = np.stack(
        [
            y + 1.402 * (cr - 128),
            y - 0.344136 * (cb - 128) - 0.714136 * (cr - 128),
            y + 1.772 * (cb - 128),
        ],
        axis=2,
    )  # JPEG (JFIF) full-range YCbCr
    return np.clip(np.floor(rgb + 0.5), 0, 255).astype(np.uint8), 1


CASES: dict[str, Callable[[Path], tuple[np.ndarray, int]]] = {
    name.removeprefix("case_"): fn for name, fn in globals().items() if name.startswith("case_")
}


@pytest.fixture(scope="module")
def mode_folder(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """One class folder holding a file per case; ``{case: (file, expected, tol)}``."""
    root = tmp_path_factory.mktemp("modes")
    folder = root / "train" / "x"
    folder.mkdir(parents=True)
    expected = {}
    for name, make in CASES.items():
        values, tol = make(folder / name)
        (file,) = folder.glob(f"{name}.*")
        expected[name] = (str(file), values, tol)
    return root, expected


def _close(actual: np.ndarray, expected: np.ndarray, tol: int) -> None:
    assert actual.shape == expected.shape
    diff = np.abs(actual.astype(int) - expected.astype(int))
    assert diff.max() <= tol, f"max difference {diff.max()} > {tol}"


@pytest.mark.parametrize("cache", ["none", "memory"])
def test_every_mode_decodes_to_the_expected_rgb(mode_folder, cache: str) -> None:
    root, expected = mode_folder
    dm = ImageFolderDataModule(root=str(root), image_size=SIZE, cache=cache, batch_size=1)
    base = dm.base_dataset("train")
    paths = [p for p, _ in dm.samples("train")]
    assert len(paths) == len(CASES)
    for name, (path, values, tol) in expected.items():
        image = base[paths.index(path)][0]
        array = np.asarray(image) if cache == "none" else image.permute(1, 2, 0).numpy()
        try:
            _close(array, values, tol)
        except AssertionError as err:
            raise AssertionError(f"{name} ({Path(path).name}): {err}") from None
        assert array.std() > 0, name  # never a constant image


def test_gray_sources_read_as_gray(mode_folder) -> None:
    _, expected = mode_folder
    gray = ["1bit", "l", "l_color_key", "la", "i16_png", "i16_tiff", "i16b_tiff", "pgm_16bit"]
    for name in gray:
        path, values, tol = expected[name]
        _close(np.asarray(read_image(path, "L")), values[..., 0], tol)


def test_gif_transparent_index_on_white(tmp_path: Path) -> None:
    """GIF is not among the scanned extensions (torchvision's ``IMG_EXTENSIONS``), but
    ``read_image`` decodes it like any file."""
    expected, _ = gif_transparent_index(tmp_path / "p")
    _close(np.asarray(read_image(str(tmp_path / "p.gif"))), expected, 0)


def test_lab_through_littlecms(tmp_path: Path) -> None:
    pytest.importorskip("PIL.ImageCms")
    # PIL's LAB: L* scaled to 0..255, a* and b* as signed bytes
    lab = np.array([[[0, 0, 0], [128, 0, 0], [255, 0, 0], [136, 80, 67], [128, 196, 0]]])
    image = Image.frombytes("LAB", (5, 1), lab.astype(np.int8).astype(np.uint8).tobytes())
    path = tmp_path / "lab.tif"
    _save(image, path, "TIFF", "LAB")
    rgb = np.asarray(read_image(str(path))).astype(int)[0]

    def srgb_gray(l_byte: int) -> float:  # L* -> Y (D50 white = 1) -> sRGB
        lightness = l_byte * 100 / 255
        y = ((lightness + 16) / 116) ** 3 if lightness > 8 else lightness / 903.3
        return 255 * (12.92 * y if y <= 0.0031308 else 1.055 * y ** (1 / 2.4) - 0.055)

    for i in range(3):  # neutral: gray with the lightness of L*
        assert np.all(np.abs(rgb[i] - srgb_gray(lab[0, i, 0])) <= 2), (i, rgb[i])
    assert rgb[3, 0] > rgb[3, 1] + 100 and rgb[3, 0] > rgb[3, 2] + 100  # a*, b* > 0: red
    assert rgb[4, 1] > rgb[4, 0] + 50  # a* < 0: green


def test_in_memory_only_modes() -> None:
    """Modes no file format stores (HSV, premultiplied alpha) still decode right."""
    hsv = _u8((SIZE, SIZE, 3))
    out = np.asarray(to_8bit(Image.fromarray(hsv, mode="HSV"), "x")).astype(float)
    ref = np.array(
        [[colorsys.hsv_to_rgb(*(hsv[i, j] / 255.0)) for j in range(SIZE)] for i in range(SIZE)]
    )
    _close(out, np.floor(ref * 255 + 0.5), 1)
    rgba = _u8((SIZE, SIZE, 4))
    premultiplied = Image.fromarray(rgba, mode="RGBA").convert("RGBa")
    expected = _on_white(np.asarray(premultiplied.convert("RGBA"))[..., :3], rgba[..., 3])
    _close(np.asarray(to_8bit(premultiplied, "x")), expected, 0)


@pytest.mark.parametrize(
    ("mode", "array", "what"),
    [
        ("F", np.linspace(0, 1, SIZE * SIZE, dtype=np.float32), "32-bit float samples"),
        ("I", np.arange(SIZE * SIZE, dtype=np.int32) * 1000, "32-bit integer samples"),
    ],
)
def test_modes_without_a_range_are_refused_by_name(
    tmp_path: Path, mode: str, array: np.ndarray, what: str
) -> None:
    root = tmp_path / "data"
    (root / "train" / "x").mkdir(parents=True)
    path = root / "train" / "x" / "sample.tif"
    _save(Image.fromarray(array.reshape(SIZE, SIZE)), path, "TIFF", mode)
    message = (
        f"cannot read image {path}: mode {mode} ({what}) has no defined range of values; "
        "save it as an 8-bit or 16-bit image; set data.init_args.skip_corrupt: true to skip "
        "unreadable images"
    )
    dm = ImageFolderDataModule(root=str(root), image_size=SIZE, batch_size=1)
    with pytest.raises(CorruptImageError) as info:
        dm.base_dataset("train")[0]
    assert str(info.value) == message
    cached = ImageFolderDataModule(root=str(root), image_size=SIZE, batch_size=1, cache="memory")
    with pytest.raises(CorruptImageError, match="has no defined range of values"):
        cached.base_dataset("train")
    skipping = ImageFolderDataModule(
        root=str(root), image_size=SIZE, batch_size=1, cache="memory", skip_corrupt=True
    )
    with pytest.warns(UserWarning, match=r"skipped 1 unreadable image\(s\) of 1"):
        assert len(skipping.base_dataset("train")) == 0
