"""The atlas benchmark runs on a small folder and reports sane fields (never timings)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from benchmarks import format_table
from benchmarks.atlas import Setup, generate, generation_rows, page_rows, run
from tests.fakes import make_image_folder

CLASSES = ["a", "b", "c"]


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """An ImageFolder of random 32x32 RGB images: 3 classes x 12 per split."""
    return make_image_folder(tmp_path / "data", CLASSES, 12, size=(32, 32))


@pytest.mark.slow
def test_generate_reports_both_phases_and_both_formats(folder: Path, tmp_path: Path) -> None:
    setup = Setup(str(folder), "val", str(tmp_path / "out"), "smallcnn", 24, 3, 8)
    figures = generate(setup)
    assert figures["samples"] == 36 and 0 < figures["live"] <= 24
    assert figures["base"] > 0
    assert figures["profile"]["seconds"] > 0 and figures["profile"]["rss"] >= figures["base"]
    for ext in ("png", "webp"):
        site = tmp_path / "out" / ext
        assert figures[ext]["files"] == figures["live"] == len(list(site.glob(f"img/m0/*.{ext}")))
        assert figures[ext]["images_mb"] > 0 and figures[ext]["html_mb"] > 0
        assert (site / "index.html").is_file()
    rows = generation_rows(figures, setup)
    assert [r.what.split(":")[0] for r in rows] == ["atlas profile", "atlas write", "atlas write"]
    assert "36 images (smallcnn, d=24)" in rows[0].what and "RSS: base" in rows[0].note
    assert f"{figures['live']} live of 24 dims, 3 images each" in rows[1].note


def test_page_rows_say_why_when_the_browser_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setenv("NCL_CHROMIUM", str(tmp_path / "no-chromium"))
    (row,) = page_rows(tmp_path / "index.html", repeats=1)
    assert math.isnan(row.seconds) and "no Chromium at" in row.note
    assert "atlas page load skipped: no Chromium at" in capsys.readouterr().err


@pytest.mark.slow
def test_run_generates_in_a_fresh_process_and_loads_the_page(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NCL_BENCH_DATA", str(folder))
    rows = run(1, backbone="smallcnn", splits=("val",), num_features=16, images_per_dim=2)
    table = format_table(rows)
    assert table.count("atlas write") == 2 and "atlas profile" in table
    assert rows[-1].what.startswith("atlas page load")  # measured, or skipped with the reason
    assert all(r.seconds > 0 for r in rows[:-2])
