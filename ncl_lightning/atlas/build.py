"""Build an atlas for one or more checkpoints on one data split (the atlas command).

Each checkpoint is tested (``trainer.test``) with a [`FeatureAtlas`][] that writes its
strips under ``img/<key>/``; one page then holds every model, so two or more can be
compared side by side.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning as L

from ncl_lightning.atlas.callback import FeatureAtlas
from ncl_lightning.atlas.checks import check_atlas_inputs
from ncl_lightning.atlas.site import write_page
from ncl_lightning.foundation.progress import Progress, quiet_lightning


def build_atlas(
    checkpoints: Sequence[str | Path],
    out: str | Path,
    config: str | Path | None = None,
    *,
    names: Sequence[str] | None = None,
    title: str | None = None,
    accelerator: str = "cpu",
    **atlas: Any,
) -> Path:
    """Write ``<out>/index.html`` with every checkpoint's features on the config's test split.

    Every input is checked first (``check_atlas_inputs``:
    the output folder, the data config and its folders, each checkpoint and whether it fits
    the data); nothing is written before.

    Args:
        checkpoints: One or more checkpoints of CL, NCL, BayesNCL or NCE classifiers.
        out: Folder of the site.
        config: A config file with a ``data:`` section (default: the first checkpoint's
            run ``config.yaml``).
        names: Labels of the models (default: their class names, numbered when repeated).
        title: Page title.
        accelerator: Where the models run (``cpu``, ``gpu``, ``auto``).
        **atlas: [`FeatureAtlas`][] arguments (``space``, ``images_per_dim``,
            ``card_images``, ``image_format``, ``eps``, ``sepin``).

    Returns:
        The page written.
    """
    inputs = check_atlas_inputs(
        checkpoints, out, config, names=names, accelerator=accelerator, **atlas
    )  # every input, before any model runs or anything is written
    paths, out, labels = inputs.checkpoints, inputs.out, inputs.labels
    entries = []
    steps = Progress(len(paths), "model")  # a line per model on stderr
    for i, (path, module, label) in enumerate(zip(paths, inputs.modules, labels, strict=True)):
        callback = FeatureAtlas(str(out), name=label, key=f"m{i}", write_site=False, **atlas)
        with steps.unit(f"{label} ({path})"), quiet_lightning():
            trainer = L.Trainer(
                accelerator=accelerator, devices=1, logger=False, enable_checkpointing=False,
                enable_progress_bar=False, enable_model_summary=False, callbacks=[callback],
            )  # fmt: skip
            trainer.test(module, datamodule=inputs.datamodule, verbose=False)
        assert callback.entry is not None
        entries.append(callback.entry | {"checkpoint": str(path)})
    steps.finish()
    default = " vs ".join(labels) + " feature atlas"
    return write_page(out, entries, title or default)
