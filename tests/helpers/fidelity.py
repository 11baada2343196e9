"""The settings table of ``docs/fidelity.md`` and its check against resolved configs.

A row names a config key, the configs it covers (``{a,b}`` brace sets, ``*`` wildcards,
names separated by spaces, relative to ``configs/`` without ``.yaml``) and our value as
a YAML literal. :func:`problems` compares rows with the flattened configs of
:mod:`tests.helpers.paper_configs` and returns one message per disagreement; an empty
list means the table and the configs agree.
"""

from __future__ import annotations

import fnmatch
import importlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.helpers.markdown import tables

COLUMNS = ["setting", "paper / release", "source", "config key", "configs", "ours", "deviation"]

# Keys that carry no paper setting (docs/fidelity.md, "Keys without rows").
EXEMPT = (
    "data.init_args.root",
    "data.init_args.download",
    "data.init_args.train_dir",
    "data.init_args.val_dir",
    "data.init_args.*_root",
    "data.init_args.cache",
    "data.init_args.cache_dir",
    "data.init_args.skip_corrupt",
    "data.init_args.num_workers",
    "data.init_args.pin_memory",
    "data.init_args.persistent_workers",
    "data.init_args.prefetch_factor",
    "data.init_args.augment_on",
    "data.init_args.hold_on_device",
    "data.init_args.decode_on",
    "model.init_args.channels_last",
    "model.init_args.step_mode",
    "model.init_args.torch_compile",
    "model.init_args.compile_mode",
    "model.init_args.optimizer.init_args.foreach",
    "model.init_args.optimizer.init_args.fused",
    "model.init_args.optimizer.init_args.differentiable",
    "model.init_args.optimizer.init_args.capturable",
    "model.init_args.optimizer.init_args.maximize",
    "model.init_args.nonfinite_loss",
    "model.init_args.grad_norm_limit",
    "model.init_args.checkpoint",
    "model.init_args.pretrained",
    "model.init_args.num_classes",
    "model.init_args.batch_size",
)

# In a ``test`` config nothing is trained: its training-only keys are exempt too.
TEST_ONLY = (
    "trainer.max_epochs",
    "trainer.accumulate_grad_batches",
    "trainer.gradient_clip_val",
    "trainer.sync_batchnorm",
    "data.init_args.n_views",
    "data.init_args.train_transform",
    "data.init_args.augmentation",
    "data.init_args.drop_last",
    "model.init_args.optimizer",
    "model.init_args.optimizer.*",
    "model.init_args.warmup_epochs",
    "model.init_args.min_lr_ratio",
    "model.init_args.scale_lr",
    "model.init_args.exclude_bias_n_norm",
    "model.init_args.label_smoothing",
    "model.init_args.lr_milestones",
    "model.init_args.lr_gamma",
)

# The trainer keys that are paper settings; the rest of `trainer` is run time.
TRAINER_SETTINGS = (
    "trainer.max_epochs",
    "trainer.precision",
    "trainer.sync_batchnorm",
    "trainer.accumulate_grad_batches",
    "trainer.gradient_clip_val",
)


@dataclass(frozen=True)
class Row:
    """One table row: ``line`` is its 1-based line in the page."""

    line: int
    setting: str
    key: str
    configs: str
    ours: Any

    def matches(self, name: str) -> bool:
        """Whether the row's config list names ``name``."""
        return any(fnmatch.fnmatchcase(name, p) for p in expand(self.configs))

    def label(self) -> str:
        return f"docs/fidelity.md:{self.line} ({self.setting!r}, {self.key})"


def expand(spec: str) -> list[str]:
    """The glob patterns of a configs cell: ``a{1,2} b`` -> ``[a1, a2, b]``."""
    out = []
    for word in spec.split():
        todo = [word]
        while todo:
            item = todo.pop()
            m = re.search(r"\{([^{}]*)\}", item)
            if m is None:
                out.append(item)
                continue
            todo += [item[: m.start()] + alt + item[m.end() :] for alt in m.group(1).split(",")]
    return sorted(out)


def _code(cell: str) -> str:
    if not (cell.startswith("`") and cell.endswith("`") and len(cell) > 1):
        raise AssertionError(f"expected a `code` cell, got {cell!r}")
    return cell[1:-1]


def read_rows(path: Path) -> list[Row]:
    """Every row of every settings table (header :data:`COLUMNS`) of the page."""
    lines = path.read_text().splitlines()
    rows = []
    for table in tables(lines):
        if table.columns != COLUMNS:
            continue
        for offset, cells in enumerate(table.body):
            line = table.start + 3 + offset
            if len(cells) != len(COLUMNS):
                raise AssertionError(f"{path.name}:{line}: {len(cells)} cells, want 7")
            setting, _, _, key, configs, ours, _ = cells
            value = yaml.safe_load(_code(ours))
            rows.append(Row(line, setting, _code(key), _code(configs), value))
    return rows


def _norm(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_norm(v) for v in value]
    return value


def _imported(path: str) -> Any:
    """The object a dotted ``ncl_lightning...`` import path names (``None`` if none)."""
    module, _, name = path.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name, None)
    except ImportError:
        return None


def _same(a: Any, b: Any) -> bool:
    a, b = _norm(a), _norm(b)
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if a != b and isinstance(a, str) and isinstance(b, str) and a.startswith("ncl_lightning."):
        # the parser writes a class's shortest import path (``ncl_lightning.LARS`` for
        # the table's ``ncl_lightning.optim.LARS``): the same class is the same setting
        found = _imported(a)
        return found is not None and found is _imported(b)
    return a == b


# A DataModule given to the model (FeatureSelection's ``transfer``) has the data's keys:
# they are exempt where the data's are (docs/fidelity.md, "Keys without rows").
NESTED_DATA = re.compile(r"^model\.init_args\.transfer\.init_args\.")


def is_setting(key: str, sub: str) -> bool:
    """Whether a resolved leaf is a setting the table must cover."""
    as_data = NESTED_DATA.sub("data.init_args.", key)
    if any(fnmatch.fnmatchcase(as_data, p) for p in EXEMPT):
        return False
    if sub == "test" and any(fnmatch.fnmatchcase(as_data, p) for p in TEST_ONLY):
        return False
    top = key.split(".")[0]
    return top in ("model", "data", "augmentation", "seed_everything") or key in TRAINER_SETTINGS


def problems(configs: dict[str, tuple[str, dict[str, Any]]], rows: list[Row]) -> list[str]:
    """Every disagreement between ``rows`` and ``configs`` (name -> (subcommand, flat
    leaves)): a config no row names, a row naming no config, a row whose key a listed
    config lacks or holds another value, a setting leaf no row covers."""
    out = []
    for row in rows:
        named = [n for n in configs if row.matches(n)]
        if not named:
            out.append(f"{row.label()}: configs `{row.configs}` name no paper config")
        for name in named:
            leaves = configs[name][1]
            if row.key not in leaves:
                out.append(f"{name}: {row.key} is not a key of the resolved config ({row.label()})")
            elif not _same(leaves[row.key], row.ours):
                out.append(
                    f"{name}: {row.key} = {leaves[row.key]!r} but the table says "
                    f"{row.ours!r} ({row.label()})"
                )
    for name, (sub, leaves) in sorted(configs.items()):
        mine = [row for row in rows if row.matches(name)]
        if not mine:
            out.append(f"{name}: matched by no row of docs/fidelity.md")
            continue
        covered = {row.key for row in mine}
        for key, value in sorted(leaves.items()):
            if is_setting(key, sub) and key not in covered:
                out.append(f"{name}: {key} = {value!r} has no row in docs/fidelity.md")
    return out
