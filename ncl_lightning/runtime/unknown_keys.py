"""Unknown keys of an ``ncl-cli`` command line or config file, refused with "did you mean".

jsonargparse refuses ``--trainer.max_epoch 3`` ("unrecognized arguments"), a config file's
``trainer: {max_epoch: 3}`` and ``--model.init_args.temprature 0.3`` on its own, but names
no close key. This check runs before it:

* on the keys a subcommand's parser knows (``parser.get_defaults()``): a key is known when
  it is one of them or lies below one (``model.init_args.temperature`` below ``model``,
  ``trainer.logger.init_args.save_dir`` below ``trainer.logger``);
* on the arguments given to the model's and the DataModule's class
  (``model.init_args.<name>``, ``--model.<name>``): those jsonargparse itself finds for the
  class named last (``--model NCL``, a file's ``class_path``), checked only when given
  after it (jsonargparse drops arguments given before a class changes) and only when the
  class imports.

So it refuses only what jsonargparse refuses too.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from jsonargparse import ArgumentParser

from ncl_lightning.foundation.errors import ConfigError, closest

# options of every jsonargparse parser that are not keys of its configuration
PARSER_OPTIONS = ("help", "print_config", "config", "c", "h")
CLASS_GROUPS = ("model", "data")  # class-typed keys whose init_args are checked
NOT_ARGUMENTS = ("class_path", "init_args", "dict_kwargs", "help")  # keys of a class key


@dataclass
class _Given:
    """The class named last for a group and the init_args names given after it, with
    where each was given (``""``: the command line; ``" in <file>"``)."""

    class_path: str | None = None
    names: list[tuple[str, str]] = field(default_factory=list)

    def named(self, class_path: Any) -> None:
        if isinstance(class_path, str):
            self.class_path, self.names = class_path, []

    def read(self, value: Any, source: str) -> None:
        """A group's value in a file or a JSON/YAML command-line value."""
        if isinstance(value, str):
            self.named(value)
        elif isinstance(value, dict):
            if "class_path" in value:
                self.named(value["class_path"])
            arguments = value.get("init_args")
            if isinstance(arguments, dict):
                self.names += [(str(name), source) for name in arguments]


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


def check_keys(
    parser: Any, subcommand: str, tokens: Sequence[str], packages: Sequence[str] = ()
) -> None:
    """Refuse the first unknown key among the ``tokens`` after ``subcommand``: command-line
    options, the keys of each ``--config`` file, and the arguments of the model's and the
    DataModule's class.

    Args:
        parser: The subcommand's jsonargparse parser.
        subcommand: ``fit``, ``validate``, ``test`` or ``predict``.
        tokens: The command line after the subcommand.
        packages: Where a short class name (``--model NCL``) is looked up.

    Raises:
        ConfigError: ``unknown key 'trainer.max_epoch'; did you mean 'trainer.max_epochs'?``.
    """
    known = known_keys(parser)
    choices = sorted(k for k in known if k != "config")
    given = {group: _Given() for group in CLASS_GROUPS}
    for i, token in enumerate(tokens):
        key = _option_key(token)
        value = token.split("=", 1)[1] if "=" in token else None
        if value is None and i + 1 < len(tokens):
            value = tokens[i + 1]
        if key in ("config", "c"):
            if value is not None:
                _check_file(value, known, choices, subcommand, given)
            continue
        if key is None or key in PARSER_OPTIONS:
            continue
        if not _covered(key, known):
            raise _refuse(key, choices, subcommand)
        group, _, rest = key.partition(".")
        if group not in given or token.startswith(f"--{group}.help"):
            continue
        if not rest:  # --model NCL, --model '{"class_path": ...}'
            given[group].read(_value(value), "")
        elif rest == "class_path":
            given[group].named(value)
        elif rest.startswith("init_args."):
            given[group].names.append((rest.split(".")[1], ""))
        elif rest.split(".")[0] not in NOT_ARGUMENTS:  # --model.temperature
            given[group].names.append((rest.split(".")[0], ""))
    for group, these in given.items():
        _check_arguments(group, these, subcommand, packages)


def _value(text: str | None) -> Any:
    """A command-line value as jsonargparse reads it: YAML (a JSON dict, or a plain name)."""
    try:
        return yaml.safe_load(text) if text is not None else None
    except yaml.YAMLError:
        return None


def _check_file(
    path: str, known: set[str], choices: list[str], subcommand: str, given: dict[str, _Given]
) -> None:
    """The keys of the config file at ``path``; a file jsonargparse cannot read (or a YAML
    string given in its place) is left to jsonargparse."""
    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, ValueError, yaml.YAMLError):
        return
    for key in _file_keys(data, known):
        if not _covered(key, known):
            raise _refuse(key, choices, subcommand, f" in {path}")
    for group, these in given.items():
        if isinstance(data, dict) and group in data:
            these.read(data[group], f" in {path}")


def class_arguments(cls: type) -> set[str]:
    """The ``init_args`` names jsonargparse accepts for ``cls`` (through ``**kwargs`` to the
    parents' ``__init__``, as it resolves them)."""
    parser = ArgumentParser(exit_on_error=False)
    parser.add_class_arguments(cls, "x", sub_configs=True)
    keys = known_keys(parser)
    return {key.split(".")[1] for key in keys if key.startswith("x.")}


def _resolve(class_path: str, packages: Sequence[str]) -> type | None:
    """The class a ``class_path`` names (a dotted path, or a short name in ``packages``),
    or None when it does not import: jsonargparse then says why."""
    module, _, name = class_path.rpartition(".")
    try:
        for where in [module] if module else packages:
            found = getattr(importlib.import_module(where), name, None)
            if isinstance(found, type):
                return found
    except Exception:  # any import failure of a user's module: jsonargparse reports it
        return None
    return None


def _check_arguments(
    group: str, given: _Given, subcommand: str, packages: Sequence[str]
) -> None:
    """Refuse an init_args name of ``group`` that its last-named class does not take."""
    cls = _resolve(given.class_path, packages) if given.class_path and given.names else None
    try:
        accepted = class_arguments(cls) if cls is not None else None
    except Exception:  # a class jsonargparse cannot take: its own error says why
        accepted = None
    if accepted is None:
        return
    for name, source in given.names:
        if name not in accepted:
            choices = [f"{group}.init_args.{a}" for a in sorted(accepted)]
            raise _refuse(f"{group}.init_args.{name}", choices, subcommand, source)
