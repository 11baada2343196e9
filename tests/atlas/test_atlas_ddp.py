"""``ncl-cli test`` with ``FeatureAtlas`` on 2 CPU ranks (gloo) writes the atlas 1 rank writes.

A demo NCL is trained for 3 batches on the bundled digits; its checkpoint is tested once in
this process and once by Lightning's ``ddp`` launcher on 2 processes (each rank profiles its
shard ``rank::2`` of the test split and the metrics reduce over the ranks). The documents
embedded in the two pages agree: every per-dimension column (EA and frequency to rounding,
histograms, majority, consistency, dead dimensions and the top images exactly, ties going to
the smaller index), the header metrics, and the image files byte for byte.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ncl_lightning.atlas import read_atlas
from ncl_lightning.runtime.cli import cli_main
from tests.conftest import ROOT
from tests.helpers.cluster import free_port, launch_env

CONFIG = str(ROOT / "configs" / "demo" / "digits_ncl.yaml")
QUIET = ["--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
         "--trainer.logger", "false"]  # fmt: skip
EXACT = ("consistency", "majority", "hist", "top", "dead")
CLOSE_METRICS = ("sparsity", "semantic_consistency", "semantic_entropy")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``last.ckpt`` of the demo NCL after 3 training batches."""
    root = tmp_path_factory.mktemp("fit")
    checkpoint = json.dumps(
        [{"class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
          "init_args": {"save_last": True}}]
    )  # fmt: skip
    cli_main(["fit", "--config", CONFIG, "--trainer.max_epochs", "1",
              "--trainer.limit_train_batches", "3", "--trainer.limit_val_batches", "0",
              "--trainer.default_root_dir", str(root), "--trainer.callbacks", checkpoint,
              *QUIET])  # fmt: skip
    (path,) = root.rglob("last.ckpt")
    return path


def _test_args(checkpoint: Path, root: Path) -> list[str]:
    """``ncl-cli test`` of ``checkpoint`` with only a ``FeatureAtlas`` (short name) writing
    ``<root>/atlas``."""
    return ["test", "--config", CONFIG, "--ckpt_path", str(checkpoint),
            "--trainer.default_root_dir", str(root), "--trainer.callbacks", "[]",
            "--trainer.callbacks+", "FeatureAtlas", "--trainer.callbacks.out", str(root / "atlas"),
            *QUIET]  # fmt: skip


def _files(folder: Path) -> dict[str, bytes]:
    """Every image file of an atlas, by path relative to ``folder``."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("img/**/*.*")}


def _assert_same_model(one: dict[str, Any], two: dict[str, Any]) -> None:
    assert one["num_samples"] == two["num_samples"] == 360  # the digits test split, once each
    assert one["num_features"] == two["num_features"] == 64
    a, b = one["dims"], two["dims"]
    for column in ("ea", "freq"):
        np.testing.assert_allclose(a[column], b[column], rtol=1e-6, atol=1e-9)
    for column in EXACT:
        assert a[column] == b[column], column
    assert any(a["top"]) and not all(a["dead"])  # something to compare
    for j, values in enumerate(a["top_values"]):  # rounded to 5 digits in the document
        np.testing.assert_allclose(values, b["top_values"][j], rtol=0, atol=1e-5)
        assert values == sorted(values, reverse=True), j  # most active first
    m1, m2 = one["metrics"], two["metrics"]
    assert m1["active_dims"] == m2["active_dims"] and m1["dead_dims"] == m2["dead_dims"]
    for key in CLOSE_METRICS + tuple(k for k in m1 if k.startswith("sepin@")):
        assert math.isclose(m1[key], m2[key], rel_tol=1e-5, abs_tol=1e-7), key
    assert one["notes"] == two["notes"]


@pytest.mark.slow
@pytest.mark.ddp
def test_two_rank_atlas_equals_one_rank_atlas(checkpoint: Path, tmp_path: Path) -> None:
    ddp = [sys.executable, "-m", "ncl_lightning.runtime.cli",
           *_test_args(checkpoint, tmp_path / "ddp"), "--trainer.strategy", "ddp",
           "--trainer.devices", "2", "--trainer.accelerator", "cpu"]  # fmt: skip
    launched = subprocess.Popen(  # the 2 ranks run while this process runs the 1-rank test
        ddp, cwd=tmp_path, env=launch_env(MASTER_PORT=str(free_port())),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        cli_main(_test_args(checkpoint, tmp_path / "one"))
        out, _ = launched.communicate(timeout=300)
    finally:
        launched.kill()
    assert launched.returncode == 0, out[-3000:]
    assert "Starting with 2 processes" in out, out[-3000:]

    one_dir, ddp_dir = tmp_path / "one" / "atlas", tmp_path / "ddp" / "atlas"
    (one,) = read_atlas(one_dir / "index.html")["models"]
    (two,) = read_atlas(ddp_dir / "index.html")["models"]
    _assert_same_model(one, two)
    images = _files(one_dir)
    assert images and images == _files(ddp_dir)  # same strips, byte for byte
    assert len(images) == sum(bool(t) for t in one["dims"]["top"])  # one file per live dim
