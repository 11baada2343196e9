"""What a fine-tuned run starts from, recorded by the run itself, and a slow reference.

``--trainer.callbacks+=tests.helpers.start_weights.BackboneAtStart`` makes an ``ncl-cli
fit`` run (in-process or a study's subprocess) save its backbone's weights at the start
of ``fit``, before any step, to ``<default_root_dir>/backbone_at_start.pt``.
:func:`backbone_of` reads a checkpoint's backbone the plain way (``torch.load`` and the
``backbone.`` prefix cut by hand), not through the package's loader, so the two can be
compared.
"""

from __future__ import annotations

from pathlib import Path

import lightning as L
import torch
from torch import Tensor

FILE = "backbone_at_start.pt"
CALLBACK = f"--trainer.callbacks+={__name__}.BackboneAtStart"


class BackboneAtStart(L.Callback):
    """Save ``pl_module.backbone.state_dict()`` when ``fit`` starts (no step taken yet)."""

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        state = {k: v.detach().cpu().clone() for k, v in pl_module.backbone.state_dict().items()}
        torch.save(state, Path(trainer.default_root_dir) / FILE)


def at_start(root: Path) -> dict[str, Tensor]:
    """The backbone weights a run under ``root`` (its ``default_root_dir``) started with."""
    return torch.load(root / FILE, map_location="cpu", weights_only=True)


def backbone_of(checkpoint: Path) -> dict[str, Tensor]:
    """Slow reference: every ``backbone.*`` tensor of a checkpoint, prefix removed."""
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)["state_dict"]
    return {k[len("backbone.") :]: v for k, v in state.items() if k.startswith("backbone.")}


def same(a: dict[str, Tensor], b: dict[str, Tensor]) -> bool:
    """The same keys and bit-identical tensors."""
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
