"""Build an atlas for one or more checkpoints on one data split (the atlas command).

Each checkpoint is tested (``trainer.test``) with a :class:`FeatureAtlas` that writes its
strips under ``img/<key>/``; one page then holds every model, so two or more can be
compared side by side.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning as L

from ncl_lightning.atlas.callback import FeatureAtlas
from ncl_lightning.atlas.collect import check_encoder, num_classes_of
from ncl_lightning.atlas.site import write_page
from ncl_lightning.runtime.checkpoint import load_method
from ncl_lightning.runtime.data_config import load_datamodule, run_config_of
from ncl_lightning.runtime.errors import ConfigError
from ncl_lightning.runtime.progress import Progress, quiet_lightning


def resolve_config(config: str | Path | None, checkpoints: Sequence[Path]) -> Path:
    """``config``, else the ``config.yaml`` of the first checkpoint's run folder."""
    if config is not None:
        return Path(config)
    found = run_config_of(checkpoints[0])
    if found is None:
        raise ConfigError(
            f"no config.yaml beside {checkpoints[0]}; give the data with --config <file>",
            key="config",
        )
    return found


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

    Every input is checked (checkpoints load and give features, the data config builds and
    has class labels) before any model is run.

    Args:
        checkpoints: One or more checkpoints of CL, NCL, BayesNCL or NCE classifiers.
        out: Folder of the site.
        config: A config file with a ``data:`` section (default: the first checkpoint's
            run ``config.yaml``).
        names: Labels of the models (default: their class names, numbered when repeated).
        title: Page title.
        accelerator: Where the models run (``cpu``, ``gpu``, ``auto``).
        **atlas: :class:`FeatureAtlas` arguments (``space``, ``images_per_dim``,
            ``card_images``, ``image_format``, ``eps``, ``sepin``).

    Returns:
        The page written.
    """
    paths = [Path(c) for c in checkpoints]
    if not paths:
        raise ConfigError("give at least one checkpoint", key="checkpoints")
    if names is not None and len(names) != len(paths):
        raise ConfigError(f"{len(names)} names for {len(paths)} checkpoints", key="names")
    config_file = resolve_config(config, paths)
    datamodule = load_datamodule(config_file)
    num_classes_of(datamodule, str(config_file))
    modules = [load_method(p) for p in paths]
    for path, module in zip(paths, modules, strict=True):
        check_encoder(module, atlas.get("space", "z"), str(path))
    labels = list(names) if names is not None else _names(modules)
    FeatureAtlas(**atlas)  # its argument checks, before any work
    out = Path(out)
    entries = []
    steps = Progress(len(paths), "model")  # a line per model on stderr
    for i, (path, module, label) in enumerate(zip(paths, modules, labels, strict=True)):
        callback = FeatureAtlas(str(out), name=label, key=f"m{i}", write_site=False, **atlas)
        with steps.unit(f"{label} ({path})"), quiet_lightning():
            trainer = L.Trainer(
                accelerator=accelerator, devices=1, logger=False, enable_checkpointing=False,
                enable_progress_bar=False, enable_model_summary=False, callbacks=[callback],
            )  # fmt: skip
            trainer.test(module, datamodule=datamodule, verbose=False)
        assert callback.entry is not None
        entries.append(callback.entry | {"checkpoint": str(path)})
    steps.finish()
    default = " vs ".join(labels) + " feature atlas"
    return write_page(out, entries, title or default)


def _names(modules: Sequence[L.LightningModule]) -> list[str]:
    """Class names, numbered when two models share one (``NCL``, ``NCL (2)``)."""
    names = [type(m).__name__ for m in modules]
    return [
        n if names.count(n) == 1 else f"{n} ({names[: i + 1].count(n)})"
        for i, n in enumerate(names)
    ]
