"""One hierarchy of user-facing errors: every error a user can cause is an ``NCLError``
subclass (``ConfigError``, ``DataError``...), carrying the config key or argument name as
``err.key`` where one is known.

The scan reads every module of ``ncl_lightning`` with ``ast`` and refuses a built-in
exception class raised directly; a genuine programming error (an internal invariant no
config or argument can reach) goes on the allow-list below, with its reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

from ncl_lightning.foundation import validation
from ncl_lightning.foundation.errors import ConfigError, EmptyMetricError, NCLError
from ncl_lightning.foundation.registry import Registry
from ncl_lightning.foundation.validation import check_output_dir
from ncl_lightning.metrics.functional import mutual_information_gap, weighted_knn_predict
from ncl_lightning.metrics.retrieval import RetrievalPrecision
from ncl_lightning.nn import SmallCNN
from ncl_lightning.optim.schedulers import warmup_cosine
from ncl_lightning.runtime.cli import cli_main
from tests.helpers.cli import DEMO, refused_fit

PACKAGE = Path(__file__).resolve().parents[2] / "ncl_lightning"
BUILT_INS = {"ValueError", "TypeError", "KeyError", "FileNotFoundError", "RuntimeError"}

#: ``(module path under ncl_lightning/, enclosing function)`` of each built-in exception
#: allowed to stay: internal invariants only, each with the reason no user can reach it.
ALLOWED: dict[tuple[str, str], str] = {
    # Set and consumed within one training_step (the loss reads what the step computed);
    # no config, argument or data reaches the empty case.
    ("methods/byol.py", "BYOL.targets"): "hook order inside one training step",
}


def _enclosing(tree: ast.AST) -> dict[ast.AST, str]:
    """Each ``raise`` node -> the dotted name of the function (or class) around it."""
    owners: dict[ast.AST, str] = {}

    def visit(node: ast.AST, name: str) -> None:
        for child in ast.iter_child_nodes(node):
            scope = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
            inner = f"{name}.{child.name}".lstrip(".") if isinstance(child, scope) else name
            if isinstance(child, ast.Raise):
                owners[child] = inner or "<module>"
            visit(child, inner)

    visit(tree, "")
    return owners


def built_in_raises(root: Path = PACKAGE) -> list[tuple[str, int, str, str]]:
    """``(path, line, function, class)`` of every ``raise <built-in>(...)`` under ``root``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node, owner in _enclosing(tree).items():
            exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if isinstance(exc, ast.Name) and exc.id in BUILT_INS:
                found.append((path.relative_to(root).as_posix(), node.lineno, owner, exc.id))
    return sorted(found)


def test_no_built_in_exception_is_raised_directly() -> None:
    offenders = [
        f"ncl_lightning/{path}:{line} ({owner}): raise {name}"
        for path, line, owner, name in built_in_raises()
        if (path, owner) not in ALLOWED
    ]
    assert not offenders, (
        "user errors must be NCLError subclasses (ncl_lightning/foundation/errors.py) carrying "
        "key=; built-in exceptions raised directly:\n" + "\n".join(offenders)
    )


def test_the_allow_list_names_only_existing_raises() -> None:
    present = {(path, owner) for path, _, owner, _ in built_in_raises()}
    assert set(ALLOWED) <= present, sorted(set(ALLOWED) - present)


def test_the_scan_finds_a_built_in_raise(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(
        "def f(x):\n    if x:\n        raise ValueError('bad')\n    raise KeyError\n"
        "class C:\n    def g(self):\n        raise ConfigError('fine', key='x')\n"
    )
    assert built_in_raises(tmp_path) == [
        ("m.py", 3, "f", "ValueError"),
        ("m.py", 4, "f", "KeyError"),
    ]


# -- the key travels with the error -------------------------------------------------------
@pytest.mark.parametrize(
    ("check", "args"),
    [
        (validation.check_finite, (float("nan"),)),
        (validation.check_positive, (0.0,)),
        (validation.check_at_least, (-1, 0)),
        (validation.check_range, (2.0, 0.0, 1.0)),
        (validation.check_choice, ("x", ["a", "b"])),
    ],
    ids=["finite", "positive", "at_least", "range", "choice"],
)
def test_generic_checks_carry_their_key(check, args) -> None:
    with pytest.raises(ConfigError) as info:
        check("model.init_args.temperature", *args)
    assert info.value.key == "model.init_args.temperature"
    assert str(info.value).startswith("model.init_args.temperature ")


def _raised(fn, *args, **kwargs) -> NCLError:
    with pytest.raises(NCLError) as info:
        fn(*args, **kwargs)
    return info.value


def test_representative_errors_carry_their_key(tmp_path: Path) -> None:
    codes, factors = torch.zeros(4, 2), torch.zeros(4, 1, dtype=torch.long)
    bank = torch.zeros(4, 3)
    (tmp_path / "afile").write_text("x")
    sgd = torch.optim.SGD([torch.zeros(1)], lr=0.1)
    cases = {
        "codes": _raised(mutual_information_gap, torch.zeros(4), factors),
        "factors": _raised(mutual_information_gap, codes, factors.float()),
        "bank_labels": _raised(weighted_knn_predict, bank[:2], bank, torch.zeros(3), 2),
        "k": _raised(weighted_knn_predict, bank[:2], bank, torch.zeros(4), 2, k=0),
        "width": _raised(SmallCNN, 1, 0, 8),
        "total_steps": _raised(warmup_cosine, sgd, 0, 0),
        "model.init_args.nonneg": _raised(Registry("map").get, "relu", "model.init_args.nonneg"),
        "trainer.default_root_dir": _raised(
            check_output_dir, "trainer.default_root_dir", tmp_path / "afile" / "run"
        ),
    }
    for key, err in cases.items():
        assert err.key == key, (key, err.key, str(err))


@pytest.mark.filterwarnings("ignore:The ``compute`` method of metric")
def test_compute_before_update_is_one_error_both_ways() -> None:
    err = _raised(RetrievalPrecision().compute)
    assert isinstance(err, EmptyMetricError)
    assert isinstance(err, ValueError) and isinstance(err, RuntimeError)


def test_a_bad_value_through_the_real_cli_names_its_key(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """``ncl-cli`` prints the full key; the error the method raised carries its argument."""
    bad = ["--model.init_args.temperature", "-0.5"]
    line = refused_fit("digits_ncl", bad, tmp_path, capsys)
    assert "model.init_args.temperature" in line and "-0.5" in line, line
    with pytest.raises(Exception) as info:  # what jsonargparse wraps the method's error in
        cli_main(["fit", "--config", str(DEMO / "digits_ncl.yaml"), "--trainer.logger", "false",
                  "--trainer.default_root_dir", str(tmp_path / "out"), *bad])  # fmt: skip
    cause: BaseException = info.value
    while cause.__cause__ is not None:
        cause = cause.__cause__
    assert isinstance(cause, ConfigError) and cause.key == "temperature", repr(cause)
