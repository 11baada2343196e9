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

from ncl_lightning.foundation.errors import ConfigError, NCLError, closest
from ncl_lightning.runtime.cli_errors import (
    loaded_subclasses,
    one_line,
    summarize,
    user_error_message,
)
from ncl_lightning.runtime.cli_names import import_public_classes
from ncl_lightning.runtime.config_files import check_config_file

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
            unknown class or argument (the message names the file and the key).
        DataError: The DataModule's own check (a data folder that is missing): the
            file, then the DataModule's one line.
    """
    path = Path(path)
    section = data_section(path)
    import_public_classes()
    _check_short_name(path, section["class_path"])
    parser = ArgumentParser(exit_on_error=False)
    parser.add_subclass_arguments(L.LightningDataModule, "data", required=True)
    try:
        config = parser.parse_object({"data": section})
    except Exception as err:  # jsonargparse's report: an unknown class or key, a wrong type
        raise ConfigError(f"{path}: {summarize(str(err))}", key="config") from None
    try:
        return parser.instantiate_classes(config).data
    except Exception as err:  # the DataModule's own check, wrapped by jsonargparse
        raise _in_file(path, err) from None


def _check_short_name(path: Path, name: Any) -> None:
    """A short class name (``DigitsDataModule``) must be a DataModule class that is loaded:
    a typo is named with the closest one (jsonargparse would read it as a dotted path)."""
    if not isinstance(name, str) or "." in name:
        return  # a full class path: jsonargparse's report names the module and class
    known = loaded_subclasses(L.LightningDataModule)
    if name not in known:
        hint = closest(name, known)
        raise ConfigError(
            f"{path}: data.class_path: unknown DataModule {name!r}"
            + (f" (did you mean {hint!r}?)" if hint else "")
            + "; give a class of ncl_lightning.data or a full class path",
            key="data.class_path",
        )


def _in_file(path: Path, err: Exception) -> NCLError:
    """One line for an error jsonargparse wraps the DataModule's own in: the file, then
    the key and the problem (as ``ncl-cli`` says it), of the DataModule's error class
    (``DataNotFoundError`` for a missing folder), else a [`ConfigError`][]."""
    message = f"{path}: {user_error_message(err) or one_line(err)}"
    cause: BaseException | None = err
    while cause is not None and not isinstance(cause, NCLError):
        cause = cause.__cause__
    if isinstance(cause, NCLError):
        try:
            return type(cause)(message, key=cause.key)
        except TypeError:  # a subclass with other arguments
            pass
    return ConfigError(message, key=getattr(cause, "key", None) or "config")


def run_config_of(checkpoint: Path, levels: int = 3) -> Path | None:
    """The ``config.yaml`` saved in a checkpoint's run folder (its folder or one above)."""
    folder = checkpoint.resolve().parent
    for candidate in [folder, *folder.parents][: levels + 1]:
        if (candidate / CONFIG_NAME).is_file():
            return candidate / CONFIG_NAME
    return None
