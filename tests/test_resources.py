"""The packaged configs: the repository's ``configs/`` files, found by name."""

from __future__ import annotations

from pathlib import Path

import pytest

from ncl_lightning.demo import label
from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.foundation.resources import (
    config_file,
    config_names,
    config_path,
    config_root,
)
from ncl_lightning.studies.landscape import VARIANTS
from tests.conftest import ROOT

CHECKOUT = ROOT / "configs"


def test_every_config_of_the_checkout_is_packaged_under_its_name() -> None:
    expected = sorted(p.relative_to(CHECKOUT).as_posix()[:-5] for p in CHECKOUT.rglob("*.yaml"))
    assert config_names() == expected
    for name in expected:
        assert config_path(name).samefile(CHECKOUT / f"{name}.yaml")
        assert config_path(f"{name}.yaml") == config_path(name)


def test_unknown_config_names_the_available_ones_in_one_line() -> None:
    with pytest.raises(ConfigError, match="no packaged config 'demo/digits_xyz'") as info:
        config_path("demo/digits_xyz")
    assert info.value.key == "config"
    assert "demo/digits_ncl" in str(info.value) and "\n" not in str(info.value)


def test_demo_takes_files_and_packaged_names(tmp_path: Path) -> None:
    own = tmp_path / "mine.yaml"
    own.write_text("model: {}\n")
    assert config_file(str(own)) == own
    assert config_file("demo/digits_cl") == config_root() / "demo" / "digits_cl.yaml"
    assert label(config_file("demo/digits_cl")) == "configs/demo/digits_cl.yaml"
    assert label(own) == str(own)
    with pytest.raises(ConfigError, match="no packaged config"):
        config_file(str(tmp_path / "absent.yaml"))


def test_study_variants_read_packaged_configs_and_overlays() -> None:
    args = VARIANTS["SimSiam, encoder only + predictor + warm start"].config_args()
    names = [Path(a).relative_to(config_root()).as_posix() for a in args[1::2]]
    assert args[::2] == ["--config"] * 4
    assert names == [
        "ground_truth/sparse_coding_simsiam.yaml",
        "ground_truth/overlays/encoder_only.yaml",
        "ground_truth/overlays/predictor.yaml",
        "ground_truth/overlays/warm_start.yaml",
    ]
