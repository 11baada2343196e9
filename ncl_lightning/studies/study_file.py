"""A seeds study of one's own rows, read from a YAML file (the format: docs/results.md).

``python -m ncl_lightning.studies.seeds my_study.yaml`` (or ``--study-file``) runs its rows
as a built-in study, into ``runs/studies/<file name>`` unless ``--out`` says otherwise. Every
key of [`Study`][ncl_lightning.studies.study_defs.Study] and
[`Row`][ncl_lightning.studies.study_defs.Row] can be given; the whole file is checked
before any cell starts, each problem one line naming the file, the row and the key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.foundation.resources import config_file
from ncl_lightning.runtime.errors import one_line
from ncl_lightning.studies.jobs import slug
from ncl_lightning.studies.study_defs import CLASS_METRICS, COLUMNS, Row, Study

KEY = "study-file"
STUDY_KEYS = ("title", "rows", "columns", "baseline", "seed_keys", "curves", "paper", "paper_title")
ROW_KEYS = ("name", "config", "overlays", "args", "pretrain")
SUFFIXES = (".yaml", ".yml")
MAPPING = "a mapping with rows: (and title:, columns:, ...)"


def load_mapping(
    path: str | Path,
    what: str = "config",
    key: str = "config",
    expected: str = "a mapping of keys such as trainer:, model:, data:",
) -> dict[str, Any]:
    """The top-level mapping of a YAML file, or one ConfigError naming the file."""
    path = Path(path).expanduser()
    if path.is_dir():
        raise ConfigError(f"{path}: {what} path is a folder, not a file", key=key)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: {what} file not found", key=key) from None
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path}: cannot read {what} file: {err}", key=key) from None
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        problem = err.problem or err.context or "invalid YAML"
        raise ConfigError(f"{where}: YAML syntax error: {problem}", key=key) from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: YAML error: {one_line(err)}", key=key) from None
    if data is None:
        raise ConfigError(f"{path}: {what} file is empty; expected {expected}", key=key)
    if not isinstance(data, dict):
        raise ConfigError(
            f"{path}: {what} file holds a {type(data).__name__} at the top level; expected "
            f"{expected}",
            key=key,
        )
    return data


check_config_file = load_mapping  # a run's config: readable YAML with a mapping on top


def _fail(path: Path, where: str, problem: str) -> ConfigError:
    return ConfigError(f"{path}: {where}: {problem}", key=KEY)


def _known(path: Path, where: str, data: dict, keys: tuple[str, ...]) -> None:
    unknown = [k for k in data if k not in keys]
    if unknown:
        raise _fail(path, f"{where}{unknown[0]}", f"unknown key; the keys are {', '.join(keys)}")


def _text(path: Path, where: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _fail(path, where, f"expected a non-empty string, got {value!r}")
    return value


def _texts(path: Path, where: str, value: Any, numbers: bool = False) -> tuple[str, ...]:
    """A list of strings (``numbers``: numbers too, as written: ``0.7`` -> ``"0.7"``)."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise _fail(path, where, f"expected a list, got {value!r}")
    kinds = (str, int, float) if numbers else (str,)
    for i, item in enumerate(value):
        if isinstance(item, bool) or not isinstance(item, kinds):
            raise _fail(path, f"{where}[{i}]", f"expected a string, got {item!r}")
    return tuple(str(item) for item in value)


def resolve_config(path: Path, where: str, name: Any) -> str:
    """A row's config as an absolute path: a file (absolute, or relative to the study
    file's folder, else to the working folder), else a packaged config name."""
    name = _text(path, where, name)
    given = Path(name).expanduser()
    here = path.resolve().parent
    tried = [given] if given.is_absolute() else [here / given, Path.cwd() / given]
    for candidate in tried:
        if candidate.is_file():
            try:
                check_config_file(candidate)
            except ConfigError as err:
                raise _fail(path, where, str(err)) from None
            return str(candidate.resolve())
    try:
        return str(config_file(name))
    except ConfigError:
        looked = " or ".join(str(c) for c in dict.fromkeys(tried))
        raise _fail(
            path, where, f"no config file {name!r} ({looked}) and no packaged config of that name"
        ) from None


def _row(path: Path, i: int, data: Any) -> Row:
    if not isinstance(data, dict):
        raise _fail(path, f"rows[{i}]", f"expected a mapping with name: and config:, got {data!r}")
    label = f"rows[{i}]" + (f" ({data['name']})" if isinstance(data.get("name"), str) else "")
    _known(path, f"{label}: ", data, ROW_KEYS)
    for key in ("name", "config"):
        if key not in data:
            raise _fail(path, label, f"{key}: missing; every row has a name and a config")
    name = _text(path, f"{label}: name", data["name"])
    overlays = _texts(path, f"{label}: overlays", data.get("overlays"))
    pretrain = data.get("pretrain")
    return Row(
        name,
        resolve_config(path, f"{label}: config", data["config"]),
        tuple(resolve_config(path, f"{label}: overlays[{j}]", o) for j, o in enumerate(overlays)),
        _texts(path, f"{label}: args", data.get("args"), numbers=True),
        None if pretrain is None else resolve_config(path, f"{label}: pretrain", pretrain),
    )


def _rows(path: Path, value: Any) -> tuple[Row, ...]:
    if not isinstance(value, list) or not value:
        raise _fail(path, "rows", f"expected a non-empty list of rows, got {value!r}")
    rows: list[Row] = []
    for i, data in enumerate(value):
        row = _row(path, i, data)
        for other in rows:
            if slug(other.name) == slug(row.name):
                same = "name" if other.name == row.name else f"folder as row {other.name!r}"
                raise _fail(path, f"rows[{i}] ({row.name})", f"name: same {same}; rename one")
        rows.append(row)
    return tuple(rows)


def load_study(path: str | Path) -> Study:
    """The [`Study`][ncl_lightning.studies.study_defs.Study] of a YAML study file, checked
    whole (nothing runs, nothing is written; a row's ``args`` are checked with the run's
    other arguments).

    Raises:
        ConfigError: ``<file>: <row and key>: <problem>``, the first problem found.
    """
    path = Path(path).expanduser()
    data = load_mapping(path, what="study", key=KEY, expected=MAPPING)
    _known(path, "", data, STUDY_KEYS)
    if "rows" not in data:
        raise _fail(path, "rows", "missing; give the rows to compare (name:, config:)")
    rows = _rows(path, data["rows"])
    names = [row.name for row in rows]
    columns = _texts(path, "columns", data.get("columns")) or CLASS_METRICS
    for i, column in enumerate(columns):
        if column not in COLUMNS:
            raise _fail(path, f"columns[{i}]", f"unknown column {column!r}; known: {list(COLUMNS)}")
    baseline = data.get("baseline")
    if baseline is not None and baseline not in names:
        raise _fail(path, "baseline", f"{baseline!r} is not a row; rows: {names}")
    paper = data.get("paper") or {}
    if not isinstance(paper, dict) or any(k not in names for k in paper):
        raise _fail(path, "paper", f"expected a mapping of row names ({names}) to text")
    return Study(
        _text(path, "title", data.get("title", path.stem)),
        rows,
        columns,
        baseline=baseline,
        seed_keys=tuple(
            "--" + k.lstrip("-") for k in _texts(path, "seed_keys", data.get("seed_keys"))
        ),
        curves=_texts(path, "curves", data.get("curves")),
        paper={str(k): str(v) for k, v in paper.items()},
        paper_title=_text(path, "paper_title", data.get("paper_title", "paper")),
        source=str(path),
    )


def chosen_study(
    name: str | None, study_file: Path | None, out: Path | None
) -> tuple[str | Study, Path | None]:
    """The study of the command line (a registered name, or a study file given as
    ``--study-file`` or positionally) and its output folder (a file's default:
    ``runs/studies/<file name>``)."""
    if study_file is not None and name is not None:
        raise ConfigError(
            f"--study-file: give a study name ({name!r}) or a study file, not both", key=KEY
        )
    if study_file is None and not (name or "").endswith(SUFFIXES):  # a registered study
        return str(name), out
    path = Path(study_file if study_file is not None else str(name))
    return load_study(path), out or Path("runs/studies") / slug(path.stem)
