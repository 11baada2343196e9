"""One-line messages for what jsonargparse and LightningCLI report over many lines.

A configuration error reaches ``ncl-cli`` as a nested report ("Parser key "model": Does
not validate against any of the Union subtypes ... Problem with given class_path ...").
[`summarize`][] walks it down to the innermost problem and says it in one line, with
the full config key (``model.init_args.temperature``), the value and, for unknown names,
the closest valid one and the valid choices.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from collections.abc import Iterable

import lightning as L
from lightning.fabric.utilities.exceptions import MisconfigurationException
from torch import nn

from ncl_lightning.foundation.errors import ConfigError, NCLError, closest
from ncl_lightning.foundation.internals import MESSAGE_FORMATS, UNION_REPORT_NOISE

# Every third-party message format read here is defined (and tested) in foundation/internals.py.
_NOISE = UNION_REPORT_NOISE
_PARSER_KEY = MESSAGE_FORMATS["parser_key"]
# A class given as a callable (``optimizer``): its ``init_args`` key on the same line.
_CALLABLE_KEY = MESSAGE_FORMATS["callable_key"]
_PROBLEM = MESSAGE_FORMATS["class_path_problem"]
_UNKNOWN_OPTION = MESSAGE_FORMATS["unknown_option"]
_NO_ATTRIBUTE = MESSAGE_FORMATS["no_attribute"]
_NO_MODULE = MESSAGE_FORMATS["no_module"]
_EXPECTED = MESSAGE_FORMATS["expected"]
_EXPECTED_LITERAL = MESSAGE_FORMATS["expected_literal"]
_GIVEN_VALUE = MESSAGE_FORMATS["given_value"]
_NONE_EXPECTED = MESSAGE_FORMATS["none_expected"]
_NOT_A_PATH = MESSAGE_FORMATS["not_a_path"]
_NON_FINITE = {"nan", "+nan", "-nan", "inf", "+inf", "-inf", "infinity", "+infinity", "-infinity"}
_UNRECOGNIZED = MESSAGE_FORMATS["unrecognized"]
_NOT_ACCEPTED = MESSAGE_FORMATS["not_accepted"]
_GROUPS = {"LightningModule": "model", "LightningDataModule": "data"}
_BASES: dict[str, type] = {"model": L.LightningModule, "data": L.LightningDataModule}
_KINDS = {"model": "method", "data": "DataModule"}
_SHORT_NAME_BASES = ("model", "data", "optimizer", "backbone")


def init_arguments(cls: type) -> list[str]:
    """Names a config may give under ``init_args`` of ``cls``: its ``__init__``
    parameters and, through ``**kwargs``, those of its parents."""
    names: list[str] = []
    for klass in cls.__mro__:
        if "__init__" not in vars(klass) or klass is object:
            continue
        params = inspect.signature(klass.__init__).parameters.values()
        variadic = (inspect.Parameter.VAR_KEYWORD, inspect.Parameter.VAR_POSITIONAL)
        names += [p.name for p in params if p.name != "self" and p.kind not in variadic]
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            break
    return list(dict.fromkeys(names))


def _class_choices(module_name: str, key: str) -> list[str]:
    """Public classes of ``module_name`` that could stand at ``key``."""
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        return []
    base = _BASES.get(key.split(".")[0]) if key.count(".") == 1 else nn.Module
    names = getattr(module, "__all__", None) or [n for n in dir(module) if not n.startswith("_")]
    classes = [getattr(module, n, None) for n in names]
    if key.endswith("backbone.class_path") and hasattr(module, "BACKBONE_CLASSES"):
        classes = list(module.BACKBONE_CLASSES)
    return sorted(
        c.__name__ for c in classes
        if isinstance(c, type) and (base is None or issubclass(c, base))
    )  # fmt: skip


def _import_class(path: str) -> type | None:
    module_name, _, name = path.rpartition(".")
    try:
        obj = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError, ValueError):
        return None
    return obj if isinstance(obj, type) else None


def _unknown_class(key: str, value: str, module_name: str, name: str) -> str:
    kind = _KINDS.get(key.split(".")[0], "class") if key.count(".") == 1 else "class"
    if key.endswith("backbone.class_path"):
        kind = "backbone"
    choices = _class_choices(module_name, key)
    hint = closest(name, choices)
    text = f"{key}: unknown {kind} {value!r}"
    if hint:
        text += f" (did you mean '{module_name}.{hint}'?)"
    if choices:
        text += f"; valid in {module_name}: {', '.join(choices)}"
    return text


def loaded_subclasses(base: type) -> set[str]:
    """Names of the public subclasses of ``base`` that Python has loaded (what
    jsonargparse resolves a short class name among)."""
    names, todo = set(), [base]
    while todo:
        for sub in todo.pop().__subclasses__():
            if not sub.__name__.startswith("_"):
                names.add(sub.__name__)
            todo.append(sub)
    return names


def _unknown_short_name(key: str, name: str) -> str:
    """``--data DigitsDataModul``: jsonargparse reads a short name it does not know as a
    path; say it is an unknown class and name the closest loaded one."""
    import torch

    bases = {"model": L.LightningModule, "data": L.LightningDataModule,
             "optimizer": torch.optim.Optimizer, "backbone": nn.Module}  # fmt: skip
    hint = closest(name, loaded_subclasses(bases[key.rsplit(".", 1)[-1]]))
    kind = _KINDS.get(key, key.rsplit(".", 1)[-1])
    advice = f"did you mean {hint!r}?" if hint else "give a full class path (module.Class)"
    return f"{key}: unknown {kind} {name!r}; {advice}"


def _unknown_key(prefix: str, option: str, class_path: str | None) -> str:
    cls = _import_class(class_path) if class_path else None
    valid = init_arguments(cls) if cls is not None else []
    hint = closest(option, [v for v in valid if v != option])  # never "did you mean" itself
    text = f"{prefix}.{option}: no such key"
    if cls is not None:
        text += f" for {cls.__name__}"
    if hint:
        text += f"; did you mean {prefix}.{hint}?"
    return text


def _expected(key: str, expected: str, got: str) -> str:
    literal = MESSAGE_FORMATS["literal"].match(expected)
    if literal:
        return f"{key}: {got!r} is not valid; valid choices: {literal.group(1)}"
    expected = MESSAGE_FORMATS["class_repr"].sub(r"\1", expected)
    if "float" in expected and got.strip().lower() in _NON_FINITE:
        return f"{key} must be a finite number, got {got!r}"
    return f"{key}: expected {expected}, got {got!r}"


def summarize(message: str, option_keys: Iterable[str] = ()) -> str:
    """One line for a jsonargparse error report.

    Args:
        message: The parser's (multi-line) error message.
        option_keys: Valid command-line keys (``trainer.max_epochs``...), for suggestions
            on an unrecognised top-level key.

    Returns:
        ``"<key>: <problem>"`` naming the key, the value and the closest valid choice.
    """
    keys = list(option_keys)
    for pattern in (_UNRECOGNIZED, _NOT_ACCEPTED):
        found = pattern.search(message)
        if found:
            key = found.group(1)
            hint = closest(key, keys)
            return f"{key}: no such key" + (f"; did you mean {hint}?" if hint else "")
    path: list[tuple[int, str, str | None]] = []  # (indent, key segment, class_path)
    lines = message.splitlines()
    for i, raw in enumerate(lines):
        line = raw.strip()
        if not line or line.startswith(_NOISE):
            continue
        indent = len(raw) - len(raw.lstrip(" -"))
        while path and path[-1][0] >= indent:
            path.pop()
        key_match, problem = _PARSER_KEY.match(line), _PROBLEM.match(line)
        callable_key = _CALLABLE_KEY.search(line)
        if callable_key:
            path.append((indent, "init_args", None))
            path.append((indent, callable_key.group(1), None))
            continue
        if key_match:
            path.append((indent, key_match.group(1), None))
            continue
        if problem:
            path.append((indent, "init_args", problem.group(1)))
            continue
        if _EXPECTED_LITERAL.match(line):
            choices = _literal_union(".".join(seg for _, seg, _ in path), lines[i:])
            if choices is not None:
                return choices
        return _leaf(line.lstrip("- "), path)
    return message.strip().splitlines()[0] if message.strip() else "invalid configuration"


_SUMMARY_KEY = re.compile(r"^([\w.\[\]-]+)(?::| must | is )")  # our own "<key>: ..." lines


def parser_error(message: str, option_keys: Iterable[str] = ()) -> ConfigError:
    """The [`ConfigError`][] for a jsonargparse report: [`summarize`][]'s line, with
    the key it names as ``err.key`` (``None`` when the line names none)."""
    line = summarize(message, option_keys)
    found = _SUMMARY_KEY.match(line)
    return ConfigError(line, key=found.group(1) if found else None)


def _literal_union(key: str, lines: list[str]) -> str | None:
    """``"<key>: <value> is not valid; valid choices: ..."`` for a value that matches none
    of a Union of ``Literal`` types (``trainer.precision``): the choices of every member,
    each once (``16`` and ``'16'`` alike), ``null`` when ``None`` is one of them.

    Args:
        lines: The report from the first ``Expected a typing.Literal[...]`` line on.

    Returns:
        The line, or ``None`` when the block is not a Union of ``Literal`` types alone.
    """
    choices: dict[str, str] = {}
    for raw in lines:
        line = raw.strip()
        literal = _EXPECTED_LITERAL.match(line)
        given = _GIVEN_VALUE.match(line)
        if literal:
            try:
                values = ast.literal_eval(f"[{literal.group(1)}]")
            except (ValueError, SyntaxError):
                return None
            for value in values:
                choices.setdefault(str(value), repr(value))
        elif _NONE_EXPECTED.match(line):
            choices.setdefault("None", "null")
        elif given:
            valid = ", ".join(choices.values())
            return f"{key}: {given.group(1)!r} is not valid; valid choices: {valid}"
        elif not line.startswith(_NOISE):
            return None
    return None


def _leaf(line: str, path: list[tuple[int, str, str | None]]) -> str:
    segments = [seg for _, seg, _ in path]
    class_path = next((cp for _, _, cp in reversed(path) if cp), None)
    missing = _NO_ATTRIBUTE.search(line) or _NO_MODULE.search(line)
    if missing and path and path[-1][2]:
        key = ".".join([*segments[:-1], "class_path"])
        if _NO_ATTRIBUTE.search(line):
            return _unknown_class(key, path[-1][2], missing.group(1), missing.group(2))
        return f"{key}: unknown class {path[-1][2]!r} (no module {missing.group(1)!r})"
    option = _UNKNOWN_OPTION.search(line)
    if option:
        return _unknown_key(".".join(segments), option.group(1) or option.group(2), class_path)
    expected = _EXPECTED.search(line)
    if expected:
        return _expected(".".join(segments), expected.group(1), expected.group(2))
    short = _NOT_A_PATH.search(line)
    if short and "." not in short.group(1) and segments and segments[-1] in _SHORT_NAME_BASES:
        return _unknown_short_name(".".join(segments), short.group(1))
    prefix = ".".join(segments)
    return f"{prefix}: {line}" if prefix else line


def instantiation_message(err: BaseException) -> str | None:
    """One line for an error raised while LightningCLI builds the model, data or trainer.

    jsonargparse wraps the class's own exception (``temperature must be > 0``) in a
    report of the Union it was checking; the innermost cause is the message, the report
    says which group (``model``, ``data``) and class it was.
    """
    text = str(err)
    if not MESSAGE_FORMATS["union"].search(text) and not isinstance(err, NCLError):
        return None
    cause: BaseException = err
    while cause.__cause__ is not None:
        cause = cause.__cause__
    inner = one_line(cause) if cause is not err else None
    subtypes = MESSAGE_FORMATS["union_subtype"].search(text)
    group = _GROUPS.get(subtypes.group(1), "") if subtypes else ""
    found = MESSAGE_FORMATS["given_class_path"].search(text)
    if inner is None:
        return summarize(text)
    if not group or inner.startswith(f"{group}.") or inner.startswith(f"{group}:"):
        return inner  # already names its key
    cls = _import_class(found.group(1)) if found else None
    first = re.match(r"^(\w+):? ", inner)
    if cls is not None and first and first.group(1) in init_arguments(cls):
        return f"{group}.init_args.{inner}"  # "temperature must be > 0" names its key
    return f"{group} ({found.group(1)}): {inner}" if found else f"{group}: {inner}"


def one_line(err: BaseException) -> str:
    """The message of ``err`` as one line; for an error re-raised from a DataLoader worker
    (whose message holds the worker's traceback) the original exception's last line."""
    text = str(err).strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return type(err).__name__
    if len(lines) > 1 and MESSAGE_FORMATS["worker_traceback"].search(text):
        return MESSAGE_FORMATS["exception_prefix"].sub("", lines[-1])
    return lines[0] if len(lines) == 1 else " ".join(lines)


def os_message(err: OSError) -> str | None:
    """``"<path>: <problem>"`` for an OS error about a path (a folder that is a file, no
    permission, a read-only disk...), or ``None`` when it names no path."""
    if err.filename is None:
        return None
    problem = err.strerror or one_line(err)
    paths = f"{err.filename}" + (f" -> {err.filename2}" if err.filename2 is not None else "")
    return f"{paths}: {problem}"


def user_error_message(err: BaseException) -> str | None:
    """The one line ``ncl-cli`` prints for a user-caused error, or ``None`` for a bug.

    User-caused: our own [`NCLError`][ncl_lightning.foundation.errors.NCLError] (checks), a
    jsonargparse report (config keys, types, a class's ``__init__`` refusing a value), Lightning's
    ``MisconfigurationException`` and an ``OSError`` naming a path (the message is the
    path and the system's reason). Anything else is a bug and keeps its traceback.
    """
    if isinstance(err, NCLError):
        return one_line(err)
    message = instantiation_message(err)
    if message is not None:
        return message
    if isinstance(err, MisconfigurationException):
        return one_line(err)
    if isinstance(err, OSError):
        return os_message(err)
    return None


__all__ = [
    "init_arguments",
    "instantiation_message",
    "loaded_subclasses",
    "one_line",
    "os_message",
    "parser_error",
    "summarize",
    "user_error_message",
]
