"""The demo driver: the three configs through ncl-cli, one table, written under the run dir."""

from __future__ import annotations

import re

import pytest

from ncl_lightning.atlas import read_atlas
from ncl_lightning.callbacks.top_activations import RowMajority
from ncl_lightning.demo import caption, table
from ncl_lightning.foundation.errors import DataError
from tests.conftest import DemoRun

ROW_LINE = re.compile(r"^- (\w+) rows \(% of (\d+) images\): ([\d ]+)$")


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _reference_caption(text: str) -> str:
    """Slow, obvious reading of a demo table: the majority-share column by its header."""
    lines = text.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("| method |"))
    heads = _cells(lines[head])
    (column,) = [j for j, h in enumerate(heads) if h.startswith("majority share (")]
    rows = heads[column].split("(")[1].split(" rows")[0]
    figures = []
    for line in lines[head + 2 :]:
        if not line.startswith("|"):
            break
        figures.append(f"{_cells(line)[0]} {_cells(line)[column]}")
    return f"mean majority share of the {rows} rows: " + ", ".join(figures)


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


def test_table_has_the_pictures_mean_majority_share_and_caption_reads_it() -> None:
    shares = {
        "CL": (0.3, 0.4, 0.2, 0.5),
        "NCL": (1.0, 0.9, 0.8, 0.7),
        "BayesNCL": (1.0, 1.0, 0.6, 0.6),
    }
    majority = {m: RowMajority((0, 1, 2, 3), s, 10) for m, s in shares.items()}
    results = {m: {"val/online_acc": 0.9, "val/z/semantic_consistency": 50.0} for m in shares}
    dims = dict.fromkeys(shares, 64)
    text = table(results, dims, majority)
    print(text)
    lines = text.splitlines()
    heads = _cells(lines[0])
    column = heads.index("majority share (4 rows × 10 images)")
    assert heads[column - 1] == "semantic consistency"
    means = {m: round(100 * sum(s) / len(s)) for m, s in shares.items()}  # 35, 85, 80
    for line in lines[2:]:
        cells = _cells(line)
        assert cells[column] == f"{means[cells[0]]}%", line
    expected = "mean majority share of the 4 rows: CL 35%, NCL 85%, BayesNCL 80%"
    assert caption(text) == _reference_caption(text) == expected
    # inside a page, the first table with the column is read
    assert caption("Intro\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n" + text + "\n\nEnd") == expected
    # a method without a picture: n/a, and the column is still the picture's
    majority["CL"] = None
    assert _cells(table(results, dims, majority).splitlines()[2])[column] == "n/a"
    # without pictures, no column (as before); caption refuses a table without it
    plain = table(results, dims)
    assert "majority share" not in plain
    with pytest.raises(DataError, match="majority share"):
        caption(plain)


@pytest.mark.slow
def test_demo_results_give_each_rows_share_and_their_mean(demo_run: DemoRun) -> None:
    written = (demo_run.out / "results.md").read_text()
    lines = written.splitlines()
    heads = _cells(lines[0])
    column = heads.index("majority share (10 rows × 10 images)")
    table_rows = {_cells(line)[0]: _cells(line)[column] for line in lines[2:5]}
    row_lines = {m.group(1): m for line in lines if (m := ROW_LINE.match(line))}
    assert list(row_lines) == list(table_rows) == ["CL", "NCL", "BayesNCL"]
    for method, match in row_lines.items():
        values = [int(v) for v in match.group(3).split()]
        assert match.group(2) == "10" and len(values) == 10
        assert all(v % 10 == 0 and 10 <= v <= 100 for v in values)  # k/10 of 10 images
        assert table_rows[method] == f"{round(sum(values) / len(values))}%", method
    assert caption(written) == _reference_caption(written)
    print(f"measured (1 epoch): {caption(written)}")
