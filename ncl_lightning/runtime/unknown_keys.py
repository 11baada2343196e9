"""Unknown keys of an ``ncl-cli`` command line or config file, refused with "did you mean".

jsonargparse refuses ``--trainer.max_epoch 3`` ("unrecognized arguments") and a config
file's ``trainer: {max_epoch: 3}`` on its own, but names no close key. This check runs
before it, on the keys a subcommand's parser knows (``parser.get_defaults()``): a key is
known when it is one of them or lies below one (``model.init_args.temperature`` below
``model``, ``trainer.logger.init_args.save_dir`` below ``trainer.logger``), which the class
named there then checks. So it refuses only what jsonargparse refuses too.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml

from ncl_lightning.foundation.errors import ConfigError, closest

# options of every jsonargparse parser that are not keys of its configuration
PARSER_OPTIONS = ("help", "print_config", "config", "c", "h")


def known_keys(parser: Any) -> set[str]:
    """The dotted keys of a jsonargparse ``parser``'s configuration."""
    return set(parser.get_defaults().keys())


def _covered(key: str, known: set[str]) -> bool:
    """Whether ``key`` is known, lies below a known key or is a group of known keys
    (``trainer``)."""
    parts = key.split(".")
    below = any(".".join(parts[:i]) in known for i in range(1, len(parts) + 1))
    return below or any(k.startswith(f"{key}.") for k in known)


def _option_key(token: str) -> str | None:
    """The key of a command-line option ``--a.b[+][=value]`` (``.help`` dropped; ``-c``:
    ``c``), else None."""
    if token in ("-c", "-h"):
        return token[1:]
    if not token.startswith("--") or token == "--":
        return None
    key = token[2:].split("=", 1)[0].rstrip("+")
    return key.removesuffix(".help") or None


def _file_keys(data: Any, known: set[str], prefix: str = "") -> Iterator[str]:
    """The dotted keys of a config file's mapping, down to a known key or a leaf."""
    if not isinstance(data, dict):
        return
    for name, value in data.items():
        key = f"{prefix}{name}"
        if key in known or not isinstance(value, dict):
            yield key
        else:
            yield from _file_keys(value, known, f"{key}.")


def _refuse(key: str, known: Iterable[str], subcommand: str, source: str = "") -> ConfigError:
    match = closest(key, known)
    hint = f"did you mean {match!r}?" if match else f"see: ncl-cli {subcommand} --help"
    return ConfigError(f"unknown key {key!r}{source}; {hint}", key=key)


def check_keys(parser: Any, subcommand: str, tokens: Sequence[str]) -> None:
    """Refuse the first unknown key among the ``tokens`` after ``subcommand``: command-line
    options and the keys of each ``--config`` file.

    Raises:
        ConfigError: ``unknown key 'trainer.max_epoch'; did you mean 'trainer.max_epochs'?``.
    """
    known = known_keys(parser)
    choices = sorted(k for k in known if k != "config")
    for i, token in enumerate(tokens):
        key = _option_key(token)
        if key in ("config", "c"):
            path = token.split("=", 1)[1] if "=" in token else None
            if path is None and i + 1 < len(tokens):
                path = tokens[i + 1]
            if path is not None:
                _check_file(path, known, choices, subcommand)
        elif key is not None and key not in PARSER_OPTIONS and not _covered(key, known):
            raise _refuse(key, choices, subcommand)


def _check_file(path: str, known: set[str], choices: list[str], subcommand: str) -> None:
    """The keys of the config file at ``path``; a file jsonargparse cannot read (or a YAML
    string given in its place) is left to jsonargparse."""
    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, ValueError, yaml.YAMLError):
        return
    for key in _file_keys(data, known):
        if not _covered(key, known):
            raise _refuse(key, choices, subcommand, f" in {path}")
