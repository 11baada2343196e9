"""``python -m ncl_lightning.atlas.feature_map CKPT [CKPT ...]``: the checkpoints' 2-D
feature maps side by side ([`ncl_lightning.plot.feature_map`][]), one panel per checkpoint,
every validation image of the first run's data (or ``--config``) a point coloured by its
class. Bad input is one line ``python -m ncl_lightning.atlas.feature_map: error: ...``,
exit status 2, before anything is written.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.plot.feature_map import EMBEDDINGS
from ncl_lightning.runtime.errors import ToolArgumentParser, run_main

PROG = "python -m ncl_lightning.atlas.feature_map"


def parser() -> argparse.ArgumentParser:
    """The tool's arguments (``--help``)."""
    p = ToolArgumentParser(prog=PROG, description="The checkpoints' 2-D feature maps side by side.")
    p.add_argument("checkpoints", nargs="+", type=Path, help="one panel per checkpoint")
    p.add_argument("--names", nargs="+", default=None, help="panel titles (default: the run)")
    p.add_argument("--out", type=Path, default=Path("feature_map.png"))
    p.add_argument("--config", default=None,
                   help="data config (default: the first run's config.yaml)")  # fmt: skip
    p.add_argument("--space", choices=("z", "h"), default="z")
    p.add_argument("--method", choices=EMBEDDINGS, default="auto")
    p.add_argument("--max-samples", type=int, default=2000, help="validation images drawn")
    p.add_argument("--seed", type=int, default=0)
    return p


def main(argv: list[str] | None = None) -> Path:
    """Draw the checkpoints' feature maps side by side; print and return the picture.

    Raises:
        SystemExit: Status 2 with one line on stderr for bad input (nothing written).
    """
    args = parser().parse_args(argv)
    return run_main(PROG, lambda: _draw(args))


def _draw(args: argparse.Namespace) -> Path:
    import numpy as np
    import torch

    from ncl_lightning.atlas.checks import resolve_config
    from ncl_lightning.atlas.data_config import load_datamodule
    from ncl_lightning.checkpoints.load import load_method
    from ncl_lightning.foundation.validation import check_output_dir
    from ncl_lightning.metrics.functional import l2_normalize_rows
    from ncl_lightning.plot.feature_map import embed_2d, embedding_used, feature_map

    names = args.names or [c.parent.parent.name for c in args.checkpoints]
    if len(names) != len(args.checkpoints):
        raise ConfigError(
            f"--names: {len(names)} names for {len(args.checkpoints)} checkpoints", key="names"
        )
    if args.max_samples < 3:
        raise ConfigError(f"--max-samples must be >= 3, got {args.max_samples}", key="max_samples")
    check_output_dir("out", args.out.parent)
    used = embedding_used(args.method)
    methods = [load_method(c).eval() for c in args.checkpoints]  # every input before any work
    datamodule = load_datamodule(resolve_config(args.config, args.checkpoints))
    panels: list[tuple[str, np.ndarray, np.ndarray | None]] = []
    for name, method in zip(names, methods, strict=True):
        features, labels, seen = [], [], 0
        with torch.no_grad():
            for x, y in datamodule.clean_dataloader("val"):
                features.append(getattr(method.encode(x), args.space).float())
                labels.append(y)
                seen += len(x)
                if seen >= args.max_samples:
                    break
        z = torch.cat(features)[: args.max_samples]
        if args.space == "z":
            z = l2_normalize_rows(z)
        xy, _ = embed_2d(z, used, args.seed)
        y = torch.cat(labels)[: args.max_samples].numpy()
        panels.append((name, xy, y))
    count = int(getattr(datamodule, "num_classes", 0) or 0)
    classes = list(getattr(datamodule, "classes", None) or [str(c) for c in range(count)])
    out = feature_map(panels, args.out, f"val {args.space}, {used}", classes)
    print(f"Feature map: {out}")
    return out


if __name__ == "__main__":
    main()
