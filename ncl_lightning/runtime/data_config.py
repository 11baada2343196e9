"""A DataModule from the ``data:`` section of a config file (what ``ncl-cli`` would build).

Commands that take a checkpoint and a data config (the feature atlas) build the DataModule
here, with jsonargparse as ``ncl-cli`` does, so short class names (``DigitsDataModule``)
and every ``init_args`` key work the same; a run's saved ``config.yaml`` is a data config.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
import yaml
from jsonargparse import ArgumentParser

from ncl_lightning.runtime.cli_names import import_public_classes
from ncl_lightning.runtime.config_files import check_config_file
from ncl_lightning.runtime.errors import ConfigError, NCLError

CONFIG_NAME = "config.yaml"  # what LightningCLI saves in a run's folder


def data_section(path: Path) -> dict[str, Any]:
    """The ``data:`` mapping of a config file (or the file itself when it is that mapping)."""
    check_config_file(path)
    raw = yaml.safe_load(path.read_text())
    section = raw.get("data", raw)
    if not isinstance(section, dict) or "class_path" not in section:
        raise ConfigError(
            f"{path}: no data section with a class_path (e.g. data: {{class_path: "
            "DigitsDataModule}})",
            key="config",
        )
    return section


def load_datamodule(path: str | Path) -> L.LightningDataModule:
    """Build the DataModule of the config file ``path``.

    Raises:
        ConfigError: The file is missing or broken, has no ``data`` section, or names an
            unknown class or argument (the message names the file).
    """
    path = Path(path)
    section = data_section(path)
    import_public_classes()
    parser = ArgumentParser(exit_on_error=False)
    parser.add_subclass_arguments(L.LightningDataModule, "data", required=True)
    try:
        config = parser.parse_object({"data": section})
        return parser.instantiate_classes(config).data
    except NCLError:  # the DataModule's own one-line errors
        raise
    except Exception as err:  # jsonargparse's parse errors and the DataModule's own
        detail = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ConfigError(f"{path}: data: {detail}", key="config") from err


def run_config_of(checkpoint: Path, levels: int = 3) -> Path | None:
    """The ``config.yaml`` saved in a checkpoint's run folder (its folder or one above)."""
    folder = checkpoint.resolve().parent
    for candidate in [folder, *folder.parents][: levels + 1]:
        if (candidate / CONFIG_NAME).is_file():
            return candidate / CONFIG_NAME
    return None
