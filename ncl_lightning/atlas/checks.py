"""Every input of the atlas command, checked in order before any model runs or anything is
written (each problem one line naming the argument or the file): the labels, the output
folder, the accelerator, the page's settings, the data config, then each checkpoint (it
loads, has the chosen features and fits the data's images)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import lightning as L

from ncl_lightning.atlas.callback import FeatureAtlas
from ncl_lightning.atlas.collect import check_atlas_data, check_encoder
from ncl_lightning.atlas.data_config import in_file, load_datamodule, run_config_of
from ncl_lightning.atlas.schema import read_atlas
from ncl_lightning.checkpoints.load import load_method
from ncl_lightning.foundation.errors import ConfigError, NCLError
from ncl_lightning.foundation.progress import quiet_lightning
from ncl_lightning.foundation.protocols import ChecksInputs
from ncl_lightning.foundation.validation import check_output_dir
from ncl_lightning.methods.preflight import example_batch, preflight


class AtlasInputs(NamedTuple):
    """What [`check_atlas_inputs`][] built while checking (the work reuses it)."""

    checkpoints: list[Path]
    out: Path
    config: Path
    datamodule: L.LightningDataModule
    modules: list[L.LightningModule]
    labels: list[str]


def resolve_config(config: str | Path | None, checkpoints: Sequence[Path]) -> Path:
    """``config``, else the ``config.yaml`` of the first checkpoint's run folder."""
    if config is not None:
        return Path(config)
    found = run_config_of(checkpoints[0])
    if found is None:
        raise ConfigError(
            f"--config: no config.yaml beside {checkpoints[0]} or in the folders above it; "
            "give the data with --config <file>",
            key="config",
        )
    return found


def check_accelerator(accelerator: str) -> None:
    """``accelerator`` is known and present here (Lightning's check, for ``--accelerator``)."""
    from lightning.fabric.utilities.exceptions import MisconfigurationException
    from lightning.pytorch import Trainer

    try:  # Lightning's own check of the accelerator, as ncl-cli's Trainer makes it
        with quiet_lightning():  # not its "GPU available" banner
            Trainer(accelerator=accelerator, devices=1, logger=False, enable_checkpointing=False)
    except (MisconfigurationException, ValueError, ImportError) as err:
        raise ConfigError(f"--accelerator: {err}", key="accelerator") from None


def check_data(config: Path) -> L.LightningDataModule:
    """The DataModule of ``config``: built, with class labels, clean images and pictures,
    and a test split it can read (``check_inputs("test")``: folders present, not empty)."""
    datamodule = load_datamodule(config)
    check_atlas_data(datamodule, f"{config}: the atlas")
    if isinstance(datamodule, ChecksInputs):
        try:
            datamodule.check_inputs("test")
        except NCLError as err:
            raise in_file(config, err) from None
    return datamodule


def check_model(module: Any, path: Path, space: str, datamodule: Any, config: Path) -> None:
    """``module`` has ``space`` features and fits the data: a batch of two zero images
    shaped like the data's runs through it
    ([`preflight`][ncl_lightning.methods.preflight.preflight])."""
    check_encoder(module, space, str(path))
    example = example_batch(datamodule)
    if example is None:
        return
    try:
        preflight(module, example)
    except ConfigError as err:
        raise ConfigError(f"{path}: {err} ({config})", key="checkpoints") from None


def check_atlas_inputs(
    checkpoints: Sequence[str | Path],
    out: str | Path,
    config: str | Path | None = None,
    *,
    names: Sequence[str] | None = None,
    accelerator: str = "cpu",
    **atlas: Any,
) -> AtlasInputs:
    """Check every argument of [`build_atlas`][ncl_lightning.atlas.build.build_atlas]; nothing
    is written (the output folder is probed with a temporary folder, removed at once).

    Raises:
        ConfigError: A bad argument, data that does not fit a model, a model without the
            features asked for.
        DataError: The data config's folders are missing or empty.
        CheckpointError: A checkpoint that is missing, unsafe, damaged or foreign.
    """
    paths = [Path(c) for c in checkpoints]
    if not paths:
        raise ConfigError("checkpoints: give at least one checkpoint", key="checkpoints")
    if names is not None and len(names) != len(paths):
        raise ConfigError(f"--names: {len(names)} names for {len(paths)} checkpoints", key="names")
    out = Path(out)
    check_output_dir("--out", out)
    page = out / "index.html"
    if page.exists():  # an atlas is rebuilt in place; a page of the user's is never replaced
        try:
            read_atlas(page)
        except (OSError, ValueError):
            raise ConfigError(
                f"--out: {page} exists and is not an atlas page; choose a new or empty folder",
                key="out",
            ) from None
    check_accelerator(accelerator)
    FeatureAtlas(**atlas)  # its argument checks
    config_file = resolve_config(config, paths)
    datamodule = check_data(config_file)
    modules = []
    for path in paths:
        module = load_method(path)
        check_model(module, path, atlas.get("space", "z"), datamodule, config_file)
        modules.append(module)
    labels = list(names) if names is not None else default_names(modules)
    return AtlasInputs(paths, out, config_file, datamodule, modules, labels)


def default_names(modules: Sequence[L.LightningModule]) -> list[str]:
    """Class names, numbered when two models share one (``NCL``, ``NCL (2)``)."""
    names = [type(m).__name__ for m in modules]
    return [
        n if names.count(n) == 1 else f"{n} ({names[: i + 1].count(n)})"
        for i, n in enumerate(names)
    ]
