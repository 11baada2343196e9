"""A DataModule from the ``data:`` section of a config file (what ``ncl-cli`` would build),
for the tools that take a checkpoint and a data config (the feature atlas); a run's saved
``config.yaml`` is a data config. jsonargparse builds it, as ``ncl-cli`` does."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import lightning as L
import yaml
from jsonargparse import ArgumentError, ArgumentParser

from ncl_lightning.foundation.errors import ConfigError, NCLError
from ncl_lightning.runtime.errors import one_line, ours

CONFIG_NAME = "config.yaml"  # what LightningCLI saves in a run's folder


def load_datamodule(path: str | Path) -> L.LightningDataModule:
    """Build the DataModule of the config file ``path``.

    Raises:
        ConfigError: The file is not YAML, has no ``data`` section, or jsonargparse refuses
            it (an unknown class or key, a wrong type): the file, then the problem.
        NCLError: The DataModule's own check (a missing data folder), after the file.
    """
    from ncl_lightning.runtime.cli import PUBLIC_PACKAGES  # short class names

    path = Path(path)
    try:
        raw: Any = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: {one_line(err)}", key="config") from None
    section = raw.get("data", raw) if isinstance(raw, dict) else None
    if not isinstance(section, dict) or "class_path" not in section:
        raise ConfigError(
            f"{path}: no data section with a class_path (e.g. data: {{class_path: "
            "DigitsDataModule}})",
            key="config",
        )
    for package in PUBLIC_PACKAGES:
        importlib.import_module(package)
    parser = ArgumentParser(exit_on_error=False)
    parser.add_subclass_arguments(L.LightningDataModule, "data", required=True)
    try:
        return parser.instantiate_classes(parser.parse_object({"data": section})).data
    except (ArgumentError, ValueError, TypeError, NCLError) as err:
        cause = ours(err)
        if cause is None:
            raise ConfigError(f"{path}: {one_line(err)}", key="config") from None
        raise in_file(path, cause) from None


def in_file(path: Path, err: NCLError) -> NCLError:
    """``err`` (same class when it can be rebuilt) with the config file named first."""
    try:
        return type(err)(f"{path}: {err}", key=err.key)
    except TypeError:  # a subclass with other arguments
        return ConfigError(f"{path}: {err}", key=err.key)


def run_config_of(checkpoint: Path, levels: int = 3) -> Path | None:
    """The ``config.yaml`` saved in a checkpoint's run folder (its folder or one above)."""
    folder = checkpoint.resolve().parent
    for candidate in [folder, *folder.parents][: levels + 1]:
        if (candidate / CONFIG_NAME).is_file():
            return candidate / CONFIG_NAME
    return None
