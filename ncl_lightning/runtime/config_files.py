"""Config files given with ``--config``: each is checked before jsonargparse reads it.

jsonargparse reports a broken config file without its name or location ("Problems
parsing config: while parsing a flow sequence", "Unexpected config:"). [`check_config_args`][]
finds every ``--config``/``-c`` file of a command line and [`check_config_file`][]
refuses, in one [`ConfigError`][ncl_lightning.foundation.errors.ConfigError] naming the file, one
that does not exist, is a folder or unreadable, is not YAML (``file:line:column``), is empty, or
whose top level is not a mapping; a ``config:`` key inside a file (a nested config,
which jsonargparse reads relative to the file's folder) is checked the same way.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml

from ncl_lightning.foundation.errors import ConfigError

CONFIG_FLAGS = ("--config", "-c")
CONFIG_KEY = "config"  # ``err.key`` of every error about a config file
CONFIG_MAPPING = "a mapping of keys such as trainer:, model:, data:"


def config_paths(args: Sequence[str]) -> Iterator[str]:
    """The values of ``--config``/``-c`` in a command line (``--config x``, ``--config=x``)."""
    items = list(args)
    for i, arg in enumerate(items):
        if arg in CONFIG_FLAGS and i + 1 < len(items):
            yield items[i + 1]
        elif arg.startswith("--config="):
            yield arg.split("=", 1)[1]


def _looks_inline(value: str) -> bool:
    """jsonargparse also takes the config itself as the value (``--config '{...}'``)."""
    return value.lstrip().startswith(("{", "[")) or "\n" in value


def load_mapping(
    path: Path,
    *,
    what: str = "config",
    key: str = CONFIG_KEY,
    expected: str = CONFIG_MAPPING,
    suffix: str = "",
) -> dict[str, Any]:
    """The top-level mapping of a YAML file, or one
    [`ConfigError`][ncl_lightning.foundation.errors.ConfigError] naming the file (and
    ``line:column`` for a YAML syntax error).

    Args:
        path: The file.
        what: What the file is, in messages (``"config"``: "config file not found").
        key: ``err.key`` of the error.
        expected: What the top level should be, for an empty file or another type.
        suffix: Appended to every message (where the file was named).

    Raises:
        ConfigError: The file does not exist, is a folder or unreadable, is not YAML, is
            empty, or its top level is not a mapping.
    """
    if not path.exists():
        raise ConfigError(f"{path}: {what} file not found{suffix}", key=key)
    if path.is_dir():
        raise ConfigError(f"{path}: {what} path is a folder, not a file{suffix}", key=key)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(
            f"{path}: {what} file is not UTF-8 text (byte {err.start}){suffix}", key=key
        ) from None
    except OSError as err:
        raise ConfigError(
            f"{path}: cannot read {what} file: {err.strerror or err}{suffix}", key=key
        ) from None
    try:
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        problem = err.problem or err.context or "invalid YAML"
        context = f" ({err.context})" if err.context and err.problem else ""
        raise ConfigError(
            f"{where}: YAML syntax error: {problem}{context}{suffix}", key=key
        ) from None
    except yaml.YAMLError as err:
        raise ConfigError(
            f"{path}: YAML error: {str(err).splitlines()[0]}{suffix}", key=key
        ) from None
    if data is None:
        raise ConfigError(f"{path}: {what} file is empty; expected {expected}{suffix}", key=key)
    if not isinstance(data, dict):
        raise ConfigError(
            f"{path}: {what} file holds a {type(data).__name__} at the top level; expected "
            f"{expected}{suffix}",
            key=key,
        )
    return data


def check_config_file(path: str | Path, included_by: Path | None = None, depth: int = 0) -> None:
    """Refuse a config file jsonargparse would report without its name or location.

    Args:
        path: The file given with ``--config``.
        included_by: The file whose ``config:`` key named ``path``, for the message.
        depth: Nesting level (a file that includes itself stops at 10).

    Raises:
        ConfigError: ``"<path>[:line:column]: <problem>"``.
    """
    path = Path(path).expanduser()
    if depth > 10:
        raise ConfigError(
            f"{path}: nested config: keys include each other more than 10 deep", key=CONFIG_KEY
        )
    suffix = f" (nested config: in {included_by})" if included_by else ""
    data = load_mapping(path, suffix=suffix)
    for section in (data, *(v for v in data.values() if isinstance(v, dict))):
        nested = section.get("config")
        if isinstance(nested, str) and not _looks_inline(nested):
            inner = Path(nested).expanduser()
            inner = inner if inner.is_absolute() else path.parent / inner
            check_config_file(inner, path, depth + 1)


def check_config_args(args: Sequence[str]) -> None:
    """[`check_config_file`][] for every config file of a command line."""
    for value in config_paths(args):
        if not _looks_inline(value):
            check_config_file(value)


__all__ = ["check_config_args", "check_config_file", "config_paths", "load_mapping"]
