"""The config reference (``docs/configs.md``) checked against the files under ``configs/``.

* every YAML under ``configs/`` is named in ``docs/configs.md``, has a row in one of its
  tables and a command that runs it with the right subcommand (an overlay, under
  ``configs/**/overlays/`` or ``configs/ablations/``: a ``fit`` command that gives it after
  a base config);
* every ``configs/...`` path named in ``docs/`` or ``README.md`` exists (brace patterns
  such as ``configs/{cifar10,cifar100}_{cl,ncl}.yaml`` are expanded, globs must match);
* every hyper-parameter cell of the config tables in ``docs/configs.md`` (a table whose
  first column is ``config``) equals the value in the file, read with ``yaml.safe_load``.
  A column is checked by its header (see ``COLUMNS``); ``—`` means "not set in the file".

Only files are read: no training, no CLI; the whole module runs in well under a second.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT
from tests.helpers.markdown import tables

CONFIG_DOC = ROOT / "docs" / "configs.md"
CONFIG_FILES = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "configs").rglob("*.yaml"))
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

MISSING = object()
EMPTY_CELLS = {"", "—", "–", "-"}
NUMBER = re.compile(r"\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
# A configs/ path in prose or code: not preceded by a path character (so ../configs/ and
# other_configs/ are not read as one), made of path, glob and brace characters.
CONFIG_PATH = re.compile(r"(?<![\w./-])configs/[\w.{},*/-]*")


def lookup(config: dict[str, Any], dotted: str) -> Any:
    """The value at ``a.b.c`` in a parsed config, or ``MISSING``."""
    node: Any = config
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return MISSING
        node = node[part]
    return node


def load(path: str) -> dict[str, Any]:
    return yaml.safe_load((ROOT / path).read_text()) or {}


# -- cell comparison ----------------------------------------------------------------------
def _text(cell: str) -> str:
    return cell.replace("`", "").strip()


def _first_token(text: str) -> str:
    return text.split()[0].strip(",;()") if text.split() else ""


def _is_number(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int | float):
        return True
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True


def value_matches(cell: str, expected: Any) -> bool:
    """A table cell against a config value: numbers numerically, booleans as yes/no,
    lists element-wise, strings by their first word; an empty cell means not set."""
    text = _text(cell)
    if text in EMPTY_CELLS:
        return expected is MISSING or expected is None
    if expected is MISSING or expected is None:
        return False
    if isinstance(expected, bool):
        return _first_token(text).lower() in ({"yes", "true"} if expected else {"no", "false"})
    if isinstance(expected, list):
        found = [float(x) for x in NUMBER.findall(text)]
        return len(found) == len(expected) and all(
            math.isclose(a, float(b)) for a, b in zip(found, expected, strict=True)
        )
    if _is_number(expected):
        match = NUMBER.search(text)
        return match is not None and math.isclose(float(match.group()), float(expected))
    return _first_token(text) == str(expected)


def class_matches(cell: str, class_path: Any) -> bool:
    """The cell's first word is the class name of ``class_path``."""
    if class_path is MISSING:
        return _text(cell) in EMPTY_CELLS
    return _first_token(_text(cell)) == str(class_path).rsplit(".", 1)[-1]


def class_named(cell: str, class_path: Any) -> bool:
    """The cell names the class of ``class_path`` somewhere (backbone descriptions)."""
    if class_path is MISSING:
        return _text(cell) in EMPTY_CELLS
    return str(class_path).rsplit(".", 1)[-1] in _text(cell)


def projector_matches(cell: str, config: dict[str, Any]) -> bool:
    """``hidden-output`` for an MLP projector, ``output`` for a linear one, ``—`` for none
    (the integers in the cell are compared in that order)."""
    args = "model.init_args."
    hidden = lookup(config, args + "proj_hidden_dim")
    output = lookup(config, args + "proj_output_dim")
    layers = lookup(config, args + "proj_num_layers")
    if layers is MISSING:
        layers = 2  # the class default of CL and NCEClassifier
    if layers == 0:
        expected: list[Any] = []
    elif layers == 1:
        expected = [output]
    else:
        expected = [hidden, output]
    expected = [v for v in expected if v is not MISSING and v != 0]
    found = [int(x) for x in re.findall(r"\d+", _text(cell))]
    return found == expected


Check = Callable[[str, dict[str, Any]], bool]


def _value(dotted: str) -> Check:
    return lambda cell, config: value_matches(cell, lookup(config, dotted))


def _class(dotted: str) -> Check:
    return lambda cell, config: class_matches(cell, lookup(config, dotted))


M = "model.init_args."
COLUMNS: dict[str, Check] = {
    "method": _class("model.class_path"),
    "model": _class("model.class_path"),
    "data": _class("data.class_path"),
    "backbone": lambda cell, cfg: class_named(cell, lookup(cfg, M + "backbone.class_path")),
    "projector": projector_matches,
    "predictor": _value(M + "pred_num_layers"),
    "τ": _value(M + "temperature"),
    "temperature": _value(M + "temperature"),
    "nonneg": _value(M + "nonneg"),
    "loss": _value(M + "loss"),
    "optimizer": _class(M + "optimizer.class_path"),
    "lr": _value(M + "optimizer.init_args.lr"),
    "weight decay": _value(M + "optimizer.init_args.weight_decay"),
    "warmup": _value(M + "warmup_epochs"),
    "batch": _value("data.init_args.batch_size"),
    "epochs": _value("trainer.max_epochs"),
    "gate": _value(M + "gate"),
    "prior ρ": _value(M + "prior"),
    "KL weight λ": _value(M + "kl_weight"),
    "temperature T": _value(M + "gate_temperature"),
    "threshold t": _value(M + "threshold"),
    "gate layers": _value(M + "gate_layers"),
    "gate lr": _value(M + "gate_lr"),
    "detach": _value(M + "detach_gate_input"),
    "EMA": _value(M + "ema_decay"),
    "k": _value(M + "k"),
    "topk": _value(M + "topk"),
    "ks": _value(M + "ks"),
    "space": _value(M + "space"),
    "probe epochs": _value(M + "probe_epochs"),
    "probe lr": _value(M + "probe_lr"),
}
UNCHECKED = {"what it changes", "applies on"}  # free-text columns of config tables
# Partial configs given as a second `--config` after a base config.
OVERLAYS = re.compile(r"/overlays/|^configs/ablations/")


# -- parsing docs/configs.md --------------------------------------------------------------
def config_tables(text: str) -> Iterator[tuple[list[str], list[list[str]]]]:
    """``(header, rows)`` of every markdown table whose first column is ``config``."""
    for table in tables(text.splitlines()):
        if table.columns[0] == "config":
            yield table.columns, table.body


def code_lines(text: str) -> list[str]:
    """Lines inside fenced code blocks."""
    out, inside = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            inside = not inside
        elif inside:
            out.append(line.strip())
    return out


def cli_commands(text: str) -> list[tuple[str, list[str]]]:
    """``(subcommand, [config, ...])`` of every one-line ``ncl-cli`` command in code."""
    commands = []
    for line in code_lines(text):
        tokens = line.split("#")[0].split()
        if len(tokens) >= 2 and tokens[0] == "ncl-cli":
            configs = [tokens[j + 1] for j, t in enumerate(tokens[:-1]) if t == "--config"]
            commands.append((tokens[1], configs))
    return commands


def expand_braces(pattern: str) -> list[str]:
    """``a{b,c}d{e,f}`` -> ``[abde, abdf, acde, acdf]`` (no nesting needed here)."""
    match = re.search(r"\{([^{}]*)\}", pattern)
    if match is None:
        return [pattern]
    head, tail = pattern[: match.start()], pattern[match.end() :]
    return [p for option in match.group(1).split(",") for p in expand_braces(head + option + tail)]


def mentioned_paths(text: str) -> list[str]:
    """Every ``configs/...`` path in ``text``, braces expanded; placeholders such as
    ``configs/<dataset>_<method>.yaml`` are skipped."""
    paths = []
    for match in CONFIG_PATH.finditer(text):
        if text[match.end() : match.end() + 1] == "<":
            continue
        raw = match.group().rstrip(".,")
        paths.extend(expand_braces(raw))
    return paths


def path_exists(path: str) -> bool:
    if any(c in path for c in "*?["):
        return any(ROOT.glob(path))
    target = ROOT / path
    return target.is_dir() if path.endswith("/") else target.exists()


@pytest.fixture(scope="module")
def doc() -> str:
    return CONFIG_DOC.read_text()


# -- the tests ----------------------------------------------------------------------------
def test_helpers() -> None:
    assert expand_braces("configs/{cifar10,cifar100}_{cl,ncl}.yaml") == [
        "configs/cifar10_cl.yaml",
        "configs/cifar10_ncl.yaml",
        "configs/cifar100_cl.yaml",
        "configs/cifar100_ncl.yaml",
    ]
    text = "see `configs/eval/*.yaml`, configs/<dataset>.yaml and ../configs/x.yaml."
    assert mentioned_paths(text) == ["configs/eval/*.yaml"]
    assert value_matches("3e-5", 3.0e-5) and not value_matches("3e-4", 3.0e-5)
    assert value_matches("—", MISSING) and not value_matches("—", 0.2)
    assert value_matches("8, 16, 32", [8, 16, 32]) and not value_matches("8, 16", [8, 16, 32])
    assert value_matches("yes", True) and value_matches("rep_relu", "rep_relu")


def test_configs_exist() -> None:
    assert len(CONFIG_FILES) > 40, CONFIG_FILES


@pytest.mark.parametrize("config", CONFIG_FILES)
def test_every_config_is_documented(config: str, doc: str) -> None:
    """Named, in a table row, and run by a command with the right subcommand."""
    assert config in doc, f"{config} is not named in docs/configs.md"
    rows = [row[0].strip("`") for _, rows in config_tables(doc) for row in rows]
    assert config in rows, f"{config} has no row in a config table of docs/configs.md"
    commands = cli_commands(doc)
    if OVERLAYS.search(config):
        assert any(sub == "fit" and config in cfgs[1:] for sub, cfgs in commands), (
            f"no `ncl-cli fit --config <base> --config {config}` in docs/configs.md"
        )
        return
    subs = {sub for sub, cfgs in commands if cfgs and cfgs[0] == config}
    # A config without trainer.max_epochs trains nothing: it is run with `test`, never
    # `fit`. A training config is run with `fit` (and may also be shown with `test`).
    if lookup(load(config), "trainer.max_epochs") is MISSING:
        assert "test" in subs and "fit" not in subs, f"{config}: commands use {sorted(subs)}"
    else:
        assert "fit" in subs, f"{config}: no `ncl-cli fit --config {config}` in docs/configs.md"


@pytest.mark.parametrize("path", DOC_FILES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_mentioned_config_paths_exist(path: Path) -> None:
    stale = [p for p in mentioned_paths(path.read_text()) if not path_exists(p)]
    assert not stale, f"{path.relative_to(ROOT)} names missing configs: {stale}"


def test_table_values_match_the_files(doc: str) -> None:
    wrong, checked = [], 0
    for header, rows in config_tables(doc):
        unknown = [h for h in header[1:] if h not in COLUMNS and h not in UNCHECKED]
        assert not unknown, f"columns without a check (add to COLUMNS or UNCHECKED): {unknown}"
        for row in rows:
            assert len(row) == len(header), f"row {row[0]} has {len(row)} of {len(header)} cells"
            config_path = row[0].strip("`")
            config = load(config_path)
            for column, cell in zip(header[1:], row[1:], strict=True):
                if column in UNCHECKED:
                    continue
                checked += 1
                if not COLUMNS[column](cell, config):
                    wrong.append(f"{config_path}: {column} = {cell!r}")
    assert not wrong, "docs/configs.md disagrees with the files:\n" + "\n".join(wrong)
    # Guard against a table format change that silently checks nothing.
    assert checked >= 5 * len(CONFIG_FILES), checked
