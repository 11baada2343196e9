"""Image files to 8-bit RGB (or gray) with the values a viewer shows, for every PIL mode.

PIL's ``convert("RGB")`` is right for most modes but not all: 16-bit grayscale (``I;16``,
what a 16-bit PNG opens as) is clipped at 255, a near-white image; ``LAB`` is copied
channel by channel as if it were RGB; alpha is dropped, showing whatever colour the
transparent pixels happen to store. [`to_8bit`][] decodes each mode as follows:

* ``1``, ``L``: gray as stored (``1`` as 0 / 255).
* ``P``, ``RGB``, ``RGBX``, ``CMYK``, ``YCbCr``, ``HSV``: PIL's conversion (palette
  lookup; CMYK by ``R = (255 - C)(255 - K) / 255``, no ICC profile; YCbCr as in JPEG,
  full range). 48-bit RGB PNGs open as ``RGB`` (PIL keeps the high byte).
* Alpha (``LA``, ``La``, ``PA``, ``RGBA``, ``RGBa``, or a ``transparency`` entry: a palette
  alpha table or a colour key): composited **on white**,
  ``round((c * a + 255 * (255 - a)) / 255)``. White because images with transparency
  (icons, sketches, product photos) are drawn to be seen on a white page; on black,
  dark line art on a transparent background would vanish.
* ``I;16``, ``I;16B``, ``I;16L``, ``I;16N`` (16-bit gray), and ``I`` from PPM/PGM (PIL
  gives their samples as 0..65535): scaled to 8 bit, ``round(v / 257)``.
* ``LAB``: CIE L*a*b* (D50) to sRGB through LittleCMS (``PIL.ImageCms``).
* ``F`` (float) and ``I`` from any other format (32-bit integers): refused, naming the
  file and the mode. Their range is not defined (0..1? 0..255? 0..65535?), so no
  scaling would be right for every file.

Single-channel sources give ``L``, the others ``RGB``; [`read_image`][] converts to the
DataModule's mode (``L`` from colour by PIL's ITU-R 601-2 luma).
"""

from __future__ import annotations

import os
import stat
from typing import Literal

import numpy as np
from PIL import Image, UnidentifiedImageError

from ncl_lightning.foundation.errors import CorruptImageError

SKIP_HINT = "set data.init_args.skip_corrupt: true to skip unreadable images"
CHANGED_HINT = (
    "it was readable when skip_corrupt checked the images at setup, so the file changed "
    "during the run; restore it (a resume continues the run)"
)
ALPHA_MODES = frozenset({"LA", "La", "PA", "RGBA", "RGBa"})
GRAY_MODES = frozenset({"1", "L", "LA", "La"})
SIXTEEN_BIT_MODES = frozenset({"I;16", "I;16B", "I;16L", "I;16N"})
SIXTEEN_BIT_I_FORMATS = frozenset({"PPM"})  # readers that give 16-bit samples as mode I
CONVERTED_MODES = frozenset({"P", "RGB", "RGBX", "CMYK", "YCbCr", "HSV"})
UNDEFINED_RANGE = {"F": "32-bit float samples", "I": "32-bit integer samples"}


def corrupt_image_error(path: str, reason: str, hint: str = SKIP_HINT) -> CorruptImageError:
    """The one-line error for an unreadable image, ending with what to do (``hint``);
    ``reason`` is kept as ``.reason``."""
    error = CorruptImageError(f"cannot read image {path}: {reason}; {hint}")
    error.path, error.reason = path, reason  # type: ignore[attr-defined]
    return error


def _on_white(image: Image.Image) -> Image.Image:
    """An image with alpha composited on white, as ``L`` (gray sources) or ``RGB``."""
    rgba = np.asarray(image.convert("RGBA"), dtype=np.uint32)
    color, alpha = rgba[..., :3], rgba[..., 3:]
    out = ((color * alpha + 255 * (255 - alpha) + 127) // 255).astype(np.uint8)
    if image.mode in GRAY_MODES:
        return Image.fromarray(np.ascontiguousarray(out[..., 0]), mode="L")
    return Image.fromarray(out, mode="RGB")


def _sixteen_to_8bit(image: Image.Image) -> Image.Image:
    """16-bit gray (0..65535) to ``L``: ``round(v / 257)``; a colour key is white."""
    values = np.asarray(image).astype(np.int64)
    out = ((values + 128) // 257).astype(np.uint8)
    key = image.info.get("transparency")
    if isinstance(key, int):
        out[values == key] = 255
    return Image.fromarray(out, mode="L")


def _lab_to_rgb(image: Image.Image) -> Image.Image:
    """CIE L*a*b* (D50, PIL's ``LAB``) to sRGB through LittleCMS."""
    from PIL import ImageCms  # only here: a PIL built without LittleCMS refuses LAB alone

    transform = ImageCms.buildTransform(
        ImageCms.createProfile("LAB"), ImageCms.createProfile("sRGB"), "LAB", "RGB"
    )
    return ImageCms.applyTransform(image, transform)  # type: ignore[return-value]


def to_8bit(image: Image.Image, path: str) -> Image.Image:
    """The 8-bit ``L`` (single-channel sources) or ``RGB`` image a viewer shows for
    ``image`` (rules in the module docstring).

    Args:
        image: An opened image of any PIL mode.
        path: Its file, named in the error.

    Raises:
        CorruptImageError: Mode ``F``, mode ``I`` outside PPM/PGM, or a mode not listed;
            the message names the file and the mode.
    """
    mode = image.mode
    if (mode == "I" and image.format in SIXTEEN_BIT_I_FORMATS) or mode in SIXTEEN_BIT_MODES:
        return _sixteen_to_8bit(image)
    if mode in UNDEFINED_RANGE:
        raise corrupt_image_error(
            path,
            f"mode {mode} ({UNDEFINED_RANGE[mode]}) has no defined range of values; save "
            "it as an 8-bit or 16-bit image",
        )
    if mode in ALPHA_MODES or ("transparency" in image.info and mode in GRAY_MODES | {"P", "RGB"}):
        return _on_white(image)
    if mode in ("1", "L"):
        return image.convert("L")
    if mode == "LAB":
        return _lab_to_rgb(image)
    if mode in CONVERTED_MODES:
        return image.convert("RGB")
    raise corrupt_image_error(path, f"image mode {mode} is not supported")


def read_image(path: str, mode: Literal["RGB", "L"] = "RGB") -> Image.Image:
    """Decode the image file ``path`` fully into a PIL image of ``mode``.

    Args:
        path: The image file.
        mode: ``RGB`` or ``L`` (gray), the DataModule's channels.

    Raises:
        CorruptImageError: The file cannot be decoded (not an image, truncated, a mode
            refused by [`to_8bit`][]); the message names the path. PIL's
            ``LOAD_TRUNCATED_IMAGES`` is never set, so a truncated file fails instead of
            loading with grey rows.
    """
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # a named pipe would block open()
            raise corrupt_image_error(path, "not a regular file (a named pipe, a device...)")
        with open(path, "rb") as f:
            image = Image.open(f)
            image.load()
            return to_8bit(image, path).convert(mode)
    except CorruptImageError:
        raise
    except UnidentifiedImageError as err:  # its text repeats the path: keep it short
        raise corrupt_image_error(path, "cannot identify image file") from err
    except Exception as err:  # OSError (truncated), SyntaxError/ValueError (broken chunks)
        reason = " ".join(str(err).split()) or type(err).__name__
        raise corrupt_image_error(path, reason) from err


__all__ = ["CHANGED_HINT", "SKIP_HINT", "corrupt_image_error", "read_image", "to_8bit"]
