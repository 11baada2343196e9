"""``python -m ncl_lightning.atlas CKPT [CKPT ...] --config DATA.yaml --out DIR``.

Writes a feature atlas (a static site: ``DIR/index.html`` and its images; open it from
disk) of one checkpoint, or of several side by side, on the test split of the data config.
Every input is checked before any model runs; bad input is one line
``python -m ncl_lightning.atlas: error: <key or path>: <problem>``, exit status 2.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.foundation.validation import check_at_least, check_int
from ncl_lightning.runtime.errors import ToolArgumentParser, run_main

PROG = "python -m ncl_lightning.atlas"


def _argparse_type(
    convert: Callable[[str], Any], expected: str, check: Callable[[Any], None]
) -> Any:
    """An argparse ``type``: ``convert`` the text, then ``check`` it (a
    ``foundation.validation`` check), its one-line message kept as argparse's error."""

    def read(text: str) -> Any:
        try:
            value = convert(text)
            check(value)
        except ConfigError as err:
            raise argparse.ArgumentTypeError(str(err).removeprefix("value ")) from None
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
        return value

    return read


positive_int = _argparse_type(int, "an integer >= 1", lambda v: check_int("value", v, 1))
"""An integer >= 1 (argparse type)."""
threshold = _argparse_type(float, "a number >= 0", lambda v: check_at_least("value", v, 0))
"""A finite number >= 0 (argparse type)."""


def parser() -> argparse.ArgumentParser:
    """The command's arguments (errors are one line, exit status 2)."""
    p = ToolArgumentParser(prog=PROG, description=__doc__)
    p.add_argument("checkpoints", nargs="+", type=Path, help="checkpoints (.ckpt) to browse")
    p.add_argument(
        "--config", type=Path, default=None,
        help="config with a data: section (default: the first checkpoint's run config.yaml)",
    )  # fmt: skip
    p.add_argument("--out", type=Path, required=True, help="folder of the site")
    p.add_argument("--names", nargs="+", default=None, help="labels of the models")
    p.add_argument("--title", default=None, help="page title")
    p.add_argument("--space", choices=("z", "h"), default="z", help="features (default z)")
    p.add_argument("--images-per-dim", type=positive_int, default=16, help="images per dimension")
    p.add_argument("--card-images", type=positive_int, default=8, help="images on each card")
    p.add_argument("--image-format", choices=("png", "jpeg", "webp"), default="png")
    p.add_argument("--eps", type=threshold, default=1e-5, help="activation threshold on |ẑ|")
    p.add_argument("--no-sepin", action="store_true", help="skip per-dimension SEPIN")
    p.add_argument("--accelerator", default="cpu", help="cpu, gpu or auto (default cpu)")
    return p


def main(argv: list[str] | None = None) -> Path:
    """Parse ``argv``, build the atlas, print and return the page's path.

    Raises:
        SystemExit: Status 2 with one line on stderr for bad input (nothing written).
    """
    args = parser().parse_args(argv)
    return run_main(PROG, lambda: _build(args))


def _build(args: argparse.Namespace) -> Path:
    from ncl_lightning.atlas.build import build_atlas  # Lightning: seconds to import

    index = build_atlas(
        args.checkpoints, args.out, args.config, names=args.names, title=args.title,
        accelerator=args.accelerator, space=args.space, images_per_dim=args.images_per_dim,
        card_images=args.card_images, image_format=args.image_format, eps=args.eps,
        sepin=not args.no_sepin,
    )  # fmt: skip
    print(f"Feature atlas: {index}")
    return index


if __name__ == "__main__":
    main()
