"""One validator for every checkpoint reader (issue 33, findings 3 and 8): damaged files
are named, and no class path read from a file is imported unless its module is trusted.

Every case goes through ``load_backbone``, ``load_method`` and ``ncl-cli test`` (the
console entry point ``main``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from ncl_lightning import CheckpointError, load_backbone, load_method
from ncl_lightning.checkpoints.check import TRUSTED_ENV, check_class_paths, trusting
from ncl_lightning.checkpoints.load import RECORD_KEY
from ncl_lightning.runtime.cli import main
from tests.checkpoints.test_checkpoint import checkpoints  # noqa: F401  (module fixture)
from tests.conftest import ROOT

Edit = Callable[[dict], object]
DAMAGED: list[tuple[str, Edit, str]] = [
    ("a list", lambda c: list(c.items()), r"the file holds a list, expected a mapping"),
    ("state_dict list", lambda c: c.update(state_dict=list(c["state_dict"].items())),
     r"'state_dict' is a list, expected a mapping of parameter names to tensors"),
    ("record string", lambda c: c.update({RECORD_KEY: "ncl"}),
     r"'ncl_lightning' is a str, expected a mapping"),
    ("no state_dict", lambda c: c.pop("state_dict"), r"no 'state_dict' entry"),
    ("hparams None", lambda c: c.update(hyper_parameters=None),
     r"'hyper_parameters' is null, expected a mapping"),
    ("a weight that is no tensor", lambda c: c["state_dict"].update({"backbone.fc.bias": [0.0]}),
     r"'state_dict\.backbone\.fc\.bias' is a list, expected a tensor"),
    ("logger entry string", lambda c: c[RECORD_KEY].update(loggers=["csv"]),
     r"'ncl_lightning\.loggers\[0\]' is a str, expected a \{class, version\} mapping"),
    ("backbone init_args list", lambda c: c[RECORD_KEY]["backbone"].update(init_args=[1]),
     r"'ncl_lightning\.backbone\.init_args' is a list, expected a mapping"),
    ("epoch string", lambda c: c.update(epoch="3"), r"'epoch' is a str, expected an integer"),
    ("method not a path", lambda c: c[RECORD_KEY].update(method="not a path!"),
     r"'ncl_lightning\.method' is a str, expected a dotted class path"),
]  # fmt: skip


def _write(source: Path, edit: Edit, path: Path) -> Path:
    ckpt = copy.deepcopy(torch.load(source, weights_only=True))
    result = edit(ckpt)
    torch.save(result if isinstance(result, list) else ckpt, path)
    return path


def _cli_test_line(path: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> str:
    out = tmp_path / "out"
    config = str(ROOT / "configs" / "demo" / "digits_ncl.yaml")
    with pytest.raises(SystemExit) as stop:
        main(["test", "--config", config, "--trainer.default_root_dir", str(out), "--ckpt_path",
              str(path), "--trainer.logger.init_args.save_dir", str(out)])  # fmt: skip
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert not out.exists()
    return lines[0]


@pytest.mark.parametrize(("name", "edit", "match"), DAMAGED, ids=[d[0] for d in DAMAGED])
def test_a_damaged_checkpoint_is_named_by_every_reader(
    checkpoints, tmp_path: Path, capsys, name: str, edit: Edit, match: str  # noqa: F811
) -> None:
    path = _write(checkpoints["ncl"][0], edit, tmp_path / "damaged.ckpt")
    for reader in (load_backbone, load_method):
        with pytest.raises(CheckpointError, match=match):
            reader(path)
    line = _cli_test_line(path, capsys, tmp_path)
    assert line.startswith(f"ncl-cli: error: {path}: ") and "damaged checkpoint" in line


@pytest.fixture
def bait(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Path]:
    """A module on ``sys.path`` that leaves a marker file when imported."""
    name = f"bait_{tmp_path.name.replace('-', '_')}"
    marker = tmp_path / "imported"
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / f"{name}.py").write_text(
        f"open({str(marker)!r}, 'w').write('ran')\nclass Net:\n    pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path / "mods"))
    monkeypatch.delenv(TRUSTED_ENV, raising=False)
    return name, marker


@pytest.mark.parametrize(
    "where",
    [
        lambda c, cls: c[RECORD_KEY]["backbone"].update(class_path=cls),
        lambda c, cls: c["hyper_parameters"].update(backbone={"class_path": cls}),
        lambda c, cls: c[RECORD_KEY].update(method=cls),
        lambda c, cls: c[RECORD_KEY].update(loggers=[{"class": cls, "version": 0}]),
    ],
    ids=["record backbone", "hparams backbone", "record method", "record logger"],
)
def test_no_untrusted_module_is_imported(
    checkpoints, tmp_path: Path, capsys, bait, where  # noqa: F811
) -> None:
    """Finding 3: ``backbone.class_path: 'this.Zen'`` printed the Zen of Python (the
    module was imported) before the checkpoint was refused."""
    name, marker = bait
    path = _write(checkpoints["ncl"][0], lambda c: where(c, f"{name}.Net"), tmp_path / "x.ckpt")
    for reader in (load_backbone, load_method):
        with pytest.raises(CheckpointError, match=rf"names class '{name}\.Net' from a module "
                           rf"that is not trusted .*set {TRUSTED_ENV}={name}$"):  # fmt: skip
            reader(path)
    line = _cli_test_line(path, capsys, tmp_path)
    assert "not trusted" in line
    assert not marker.exists()  # nothing ran


def test_a_module_trusted_by_the_environment_is_imported(
    checkpoints, tmp_path: Path, monkeypatch, bait  # noqa: F811
) -> None:
    name, marker = bait
    edit = lambda c: c[RECORD_KEY]["backbone"].update(class_path=f"{name}.Net")  # noqa: E731
    path = _write(checkpoints["ncl"][0], edit, tmp_path / "x.ckpt")
    monkeypatch.setenv(TRUSTED_ENV, f"elsewhere, {name}")
    with pytest.raises(CheckpointError, match=rf"backbone '{name}\.Net' is not a Module subclass"):
        load_backbone(path)
    assert marker.read_text() == "ran"


def test_the_trusted_modules_are_this_package_its_libraries_and_what_is_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(TRUSTED_ENV, raising=False)
    csv = "lightning.pytorch.loggers.CSVLogger"
    ckpt = {RECORD_KEY: {"method": "ncl_lightning.methods.NCL",
                         "backbone": {"class_path": "torchvision.models.ResNet"},
                         "loggers": [{"class": csv, "version": 0}]},
            "hyper_parameters": {"optimizer": {"class_path": "torch.optim.SGD"}}}  # fmt: skip
    check_class_paths(ckpt, "x")
    mine = copy.deepcopy(ckpt)
    mine["hyper_parameters"]["backbone"] = {"class_path": "mylab.nets.Net"}
    with pytest.raises(CheckpointError, match=r"mylab\.nets\.Net"):
        check_class_paths(mine, "x")
    check_class_paths(mine, "x", trusted=["mylab.nets"])  # what the user's config names
    with trusting(["mylab"]):
        check_class_paths(mine, "x")
    lookalike = copy.deepcopy(ckpt)
    lookalike[RECORD_KEY]["method"] = "torchx.Evil"  # a prefix of a name is not its module
    with pytest.raises(CheckpointError, match=r"torchx\.Evil"):
        check_class_paths(lookalike, "x")
