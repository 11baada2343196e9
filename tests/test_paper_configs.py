"""Every paper config trains what ``docs/fidelity.md`` says it trains.

Each paper config (found by glob, so a new file is caught) is resolved once by the
parser of ``ncl-cli`` (:mod:`tests.helpers.paper_configs`), flattened to dotted leaves
plus its augmentation preset, and compared with the settings tables of the page
(:mod:`tests.helpers.fidelity`). The constructed cases below change one thing in a
copy and check that exactly that is reported, so the comparison cannot pass vacuously.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT
from tests.helpers.fidelity import Row, expand, problems, read_rows
from tests.helpers.paper_configs import (
    CONFIGS,
    Resolver,
    augmentation_leaves,
    leaves,
    paper_config_names,
    subcommand,
)

PAGE = ROOT / "docs" / "fidelity.md"
Configs = dict[str, tuple[str, dict[str, Any]]]


@pytest.fixture(scope="module")
def resolver() -> Resolver:
    return Resolver(CONFIGS / "cifar10_ncl.yaml")


def flat(resolver: Resolver, path: Path) -> tuple[str, dict[str, Any]]:
    """(subcommand, leaves + augmentation preset) of one config file."""
    sub = subcommand(path)
    cfg = resolver(path, sub)
    return sub, {**leaves(cfg), **augmentation_leaves(cfg, sub)}


@pytest.fixture(scope="module")
def resolved(resolver: Resolver) -> Configs:
    return {name: flat(resolver, CONFIGS / f"{name}.yaml") for name in paper_config_names()}


@pytest.fixture(scope="module")
def rows() -> list[Row]:
    return read_rows(PAGE)


def test_the_paper_config_set() -> None:
    names = paper_config_names()
    for family in ("cifar10_ncl", "imagenet100_bayesncl", "nce/cifar10_nce",
                   "nce/imagenet100_nce_finetune", "nce/imagenet100_ce_finetune",
                   "nce/cifar10_ce_finetune",
                   "eval/cifar100_linear", "eval/imagenet100_ood",
                   "ground_truth/sparse_coding_simsiam", "ground_truth/dsprites_ncl"):  # fmt: skip
        assert family in names
    overlays = ("ground_truth/overlays/", "nce/overlays/")
    assert not [n for n in names if n.startswith(("demo/", "subset/", *overlays))]
    assert not [n for n in names if "subset" in n or n.startswith("eval/digits_")]


def test_every_paper_config_matches_the_table(resolved: Configs, rows: list[Row]) -> None:
    found = problems(resolved, rows)
    assert not found, "\n".join(found)


def test_a_changed_value_is_reported(
    resolver: Resolver, resolved: Configs, rows: list[Row], tmp_path: Path
) -> None:
    text = (CONFIGS / "cifar10_ncl.yaml").read_text()
    assert text.count("lr: 0.4 ") == 1
    copy = tmp_path / "cifar10_ncl.yaml"
    copy.write_text(text.replace("lr: 0.4 ", "lr: 0.5 "))
    found = problems({**resolved, "cifar10_ncl": flat(resolver, copy)}, rows)
    assert len(found) == 1, found
    assert found[0].startswith("cifar10_ncl: model.init_args.optimizer.init_args.lr = 0.5 ")
    assert "the table says 0.4" in found[0]


def test_a_changed_preset_value_is_reported(resolved: Configs, rows: list[Row]) -> None:
    sub, flat_leaves = resolved["cifar100_cl"]
    assert flat_leaves["augmentation.blur_p"] == 0.5
    changed = {**flat_leaves, "augmentation.blur_p": 0.0}
    found = problems({**resolved, "cifar100_cl": (sub, changed)}, rows)
    assert found == [found[0]] and found[0].startswith("cifar100_cl: augmentation.blur_p = 0.0 ")


def test_a_new_leaf_is_reported(resolved: Configs, rows: list[Row]) -> None:
    sub, flat_leaves = resolved["imagenet100_ncl"]
    grown = {**flat_leaves, "model.init_args.new_setting": 3}
    found = problems({**resolved, "imagenet100_ncl": (sub, grown)}, rows)
    assert found == [
        "imagenet100_ncl: model.init_args.new_setting = 3 has no row in docs/fidelity.md"
    ]


def test_run_time_keys_need_no_row(resolved: Configs, rows: list[Row]) -> None:
    sub, flat_leaves = resolved["cifar10_cl"]
    assert (
        "trainer.log_every_n_steps" in flat_leaves and "data.init_args.num_workers" in flat_leaves
    )
    grown = {**flat_leaves, "data.init_args.num_workers": 64, "trainer.log_every_n_steps": 1}
    assert problems({**resolved, "cifar10_cl": (sub, grown)}, rows) == []


def test_a_new_config_file_is_reported(resolved: Configs, rows: list[Row], tmp_path: Path) -> None:
    for name in ("zz_new.yaml", "eval/cifar10_subset_x.yaml", "demo/x.yaml", "nce/zz_ce.yaml"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text((CONFIGS / "cifar10_ncl.yaml").read_text())
    assert paper_config_names(tmp_path) == ["nce/zz_ce", "zz_new"]
    found = problems({**resolved, "zz_new": resolved["cifar10_ncl"]}, rows)
    assert found == ["zz_new: matched by no row of docs/fidelity.md"]


def test_a_stale_row_is_reported(resolved: Configs, rows: list[Row]) -> None:
    gone = Row(1, "gone", "model.init_args.temperature", "cifar10_gone", 0.2)
    moved = Row(2, "moved", "model.init_args.moved_key", "cifar10_cl", 1)
    found = problems(resolved, [*rows, gone, moved])
    assert len(found) == 2, found
    assert "configs `cifar10_gone` name no paper config" in found[0]
    assert found[1].startswith("cifar10_cl: model.init_args.moved_key is not a key")


def test_config_lists_expand() -> None:
    assert expand("cifar{10,100}_{cl,ncl} eval/*_knn") == [
        "cifar100_cl", "cifar100_ncl", "cifar10_cl", "cifar10_ncl", "eval/*_knn",
    ]  # fmt: skip
