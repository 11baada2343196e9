"""The demo driver: the three configs through ncl-cli, one table, written under the run dir."""

from __future__ import annotations

import re

import pytest

from ncl_lightning.atlas import read_atlas
from tests.conftest import DemoRun


@pytest.mark.slow
def test_demo_writes_side_by_side_table(demo_run: DemoRun) -> None:
    out = demo_run.out
    written = (out / "results.md").read_text()
    assert written == demo_run.report
    rows = {
        line.split("|")[1].strip(): line for line in written.splitlines() if line.startswith("| ")
    }
    assert set(rows) == {"method", "CL", "NCL", "BayesNCL"}
    cl_sparsity = rows["CL"].split("|")[4].strip()
    print(f"measured: CL z sparsity {cl_sparsity}")
    # CL features are dense; a few entries may fall under the 1e-5 threshold on some hosts
    assert cl_sparsity.endswith("%") and float(cl_sparsity[:-1]) < 1.0, rows["CL"]
    assert "/ 64" in rows["NCL"]
    assert "%" in rows["BayesNCL"].split("|")[-2]  # the gate open rate column
    for run in ("digits_cl", "digits_ncl", "digits_bayesncl"):
        assert list((out / run).rglob("last.ckpt")), run
    assert (out / "top_activations_cl_vs_ncl_vs_bayesncl.png").is_file()
    curves = out / "curves.png"  # the three runs' training curves on shared panels
    assert curves.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "curves.png" in demo_run.stdout
    for k in (1, 2, 3):  # one progress line per run, with elapsed time and ETA
        assert re.search(rf"\[run {k}/3\] done in .*\| elapsed .*\| ETA", demo_run.stderr), k


@pytest.mark.slow
def test_demo_writes_the_atlas_of_the_three_methods(demo_run: DemoRun) -> None:
    index = demo_run.out / "atlas" / "index.html"
    assert f"Feature atlas: {index}" in demo_run.stdout
    atlas = read_atlas(index)
    assert [m["name"] for m in atlas["models"]] == ["CL", "NCL", "BayesNCL"]
    for model in atlas["models"]:
        assert model["checkpoint"].endswith("last.ckpt")
        assert model["num_features"] == 64 and model["num_classes"] == 10
        assert model["split"] == "test" and model["num_samples"] > 0
        # one strip per dimension with images, none for the others
        strips = sorted((index.parent / "img" / model["key"]).iterdir())
        assert len(strips) == sum(1 for top in model["dims"]["top"] if top)
    gate = atlas["models"][2]["dims"]["gate"]
    assert gate is not None and all(0.0 <= g <= 1.0 for g in gate)
    assert atlas["models"][0]["dims"]["gate"] is None
