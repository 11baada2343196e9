"""``python -m ncl_lightning.export CKPT OUT_DIR [--format F] [--overwrite] [--license L]``.

Writes a trained backbone's folder, ready for ``huggingface_hub`` upload (``hf upload
<user>/<repo> OUT_DIR``): ``model.safetensors``, ``config.json`` and the model card
``README.md``, plus ``torchvision_state_dict.pt`` with ``--format torchvision`` or
``all`` ([`export_backbone`][ncl_lightning.checkpoints.export.export_backbone]). Every input
is checked before anything is written; bad input is one line
``python -m ncl_lightning.export: error: <key or path>: <problem>``, exit status 2.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ncl_lightning.runtime.errors import ToolArgumentParser, run_main

PROG = "python -m ncl_lightning.export"
FORMATS = ("safetensors", "torchvision", "timm", "all")  # checkpoints.export.EXPORT_FORMATS


def parser() -> argparse.ArgumentParser:
    """The command's arguments (errors are one line, exit status 2)."""
    p = ToolArgumentParser(prog=PROG, description=__doc__)
    p.add_argument("checkpoint", type=Path, help="checkpoint (.ckpt) of any method or probe")
    p.add_argument("out_dir", type=Path, help="folder to write (new or empty)")
    p.add_argument(
        "--format", choices=FORMATS, default="safetensors",
        help="safetensors (default): weights, config.json, README.md; torchvision: also "
        "torchvision_state_dict.pt; timm: refuse unless timm's model is the same "
        "architecture; all: every variant that applies",
    )  # fmt: skip
    p.add_argument("--overwrite", action="store_true",
                   help="replace the export's files in a folder that is not empty")  # fmt: skip
    p.add_argument("--license", default="mit", help="the model card's license (default mit)")
    return p


def main(argv: list[str] | None = None) -> Path:
    """Parse ``argv``, export, print and return the folder.

    Raises:
        SystemExit: Status 2 with one line on stderr for bad input (nothing written).
    """
    args = parser().parse_args(argv)

    def export() -> Path:
        from ncl_lightning.checkpoints.export import export_backbone  # torch: seconds

        out = export_backbone(args.checkpoint, args.out_dir, format=args.format,
                              overwrite=args.overwrite, license=args.license)  # fmt: skip
        print(f"Exported backbone: {out} ({', '.join(sorted(p.name for p in out.iterdir()))})")
        return out

    return run_main(PROG, export)


__all__ = ["main", "parser"]
