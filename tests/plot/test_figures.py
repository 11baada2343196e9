"""Figures for papers: one style without global state, labelled activation grids drawn
pixel for pixel, and PDF/SVG files beside the PNG."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import matplotlib
import numpy as np
import pytest
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from PIL import Image

from ncl_lightning.callbacks.top_activations import majority_classes
from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.plot import pictures, style
from ncl_lightning.plot.curves import draw_curves
from ncl_lightning.plot.metrics_csv import load_runs
from ncl_lightning.plot.style import check_formats, figure_style, save_figure

NAMES = ["zero", "one", "two", "three"]


def _grid_inputs(rows: int = 3, cols: int = 4, side: int = 8):
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (rows, cols, side, side, 3), dtype=np.uint8)
    labels = rng.integers(0, len(NAMES), (rows, cols)).tolist()
    return images, labels


def _hand_majority(labels: list[int]) -> tuple[int, float]:
    """The slow obvious reference: count each class, keep the largest (smallest on ties)."""
    best, best_count = None, -1
    for c in sorted(set(labels)):
        count = sum(1 for x in labels if x == c)
        if count > best_count:
            best, best_count = c, count
    return best, best_count / len(labels)


def assert_valid_vector(path: Path) -> None:
    """A PDF starts with ``%PDF`` and ends with ``%%EOF``; an SVG parses as XML with an
    ``<svg>`` root."""
    data = path.read_bytes()
    if path.suffix == ".pdf":
        assert data.startswith(b"%PDF-") and b"%%EOF" in data[-32:], path
    else:
        root = ET.fromstring(data)
        assert root.tag.rsplit("}", 1)[-1] == "svg", path


def _majority(labels: list[int]) -> tuple[int, float]:
    """One row through the TopActivations' tensor op."""
    best, share = majority_classes(torch.tensor([labels]), 4)
    return int(best[0]), float(share[0])


def test_majority_class_matches_a_hand_count() -> None:
    rng = np.random.default_rng(1)
    for _ in range(50):
        labels = rng.integers(0, 4, int(rng.integers(1, 12))).tolist()
        assert _majority(labels) == _hand_majority(labels)
    assert _majority([3, 1, 3, 1]) == (1, 0.5)  # a tie: the smaller label


def test_grid_text_holds_title_row_labels_and_classes() -> None:
    images, labels = _grid_inputs()
    dims, eas = [17, 4, 9], [0.25, 0.125, 0.0625]
    rows = [
        pictures.row_label(dim, ea, _majority(row), NAMES)
        for dim, ea, row in zip(dims, eas, labels, strict=True)
    ]
    captions = [[NAMES[c] for c in row] for row in labels]
    title = "NCL · SmallCNN backbone\nval z, epoch 7"
    fig = pictures.activation_grid(images, rows, title, captions, cell=32)
    texts = [t.get_text() for t in fig.texts]
    assert texts[0] == title
    for dim, ea, row in zip(dims, eas, labels, strict=True):
        label, share = _hand_majority(row)
        expected = f"dim {dim}\nEA {ea:.3f}\n{NAMES[label]} {round(100 * share)}%"
        assert expected in texts, (expected, texts)
    rest = sorted(texts[1:])
    for text in rows:
        rest.remove(text)
    assert rest == sorted(c for row in captions for c in row)  # one caption per image
    # without class labels: the id line is left out
    assert pictures.row_label(3, 0.5, None, NAMES) == "dim 3\nEA 0.500"
    assert pictures.row_label(3, 0.5, (7, 1.0), NAMES) == "dim 3\nEA 0.500\n7 100%"  # no name


@pytest.mark.parametrize("captions", [True, False])
def test_grid_png_has_its_size_and_every_image_nearest_upscaled(tmp_path: Path, captions):
    images, labels = _grid_inputs(side=8)
    cell = 40
    names = [[NAMES[c] for c in row] for row in labels] if captions else None
    fig = pictures.activation_grid(images, ["a", "b", "c"], "one line", names, cell=cell)
    (png,) = save_figure(fig, tmp_path / "grid.png")
    canvas = np.asarray(Image.open(png).convert("RGB"))
    width, height = pictures.grid_size(3, 4, cell, title_lines=1, captions=captions)
    assert canvas.shape == (height, width, 3)
    top = pictures.TITLE_LINE + 8
    row = max(cell + (pictures.CAPTION if captions else 0), pictures.ROW_LABEL) + pictures.PAD
    for r in range(3):
        for c in range(4):
            y, x = top + r * row, pictures.LABEL_WIDTH + pictures.PAD + c * (cell + pictures.PAD)
            tile = canvas[y : y + cell, x : x + cell]
            expected = np.kron(images[r, c], np.ones((cell // 8, cell // 8, 1), np.uint8))
            assert (tile == expected).all(), (r, c)


def test_a_narrow_grid_keeps_room_for_its_title_and_drops_crowded_captions() -> None:
    images, labels = _grid_inputs(rows=2, cols=2)
    names = [[NAMES[c] for c in row] for row in labels]
    fig = pictures.activation_grid(images, ["a", "b"], "t", names, cell=16)
    assert [t.get_text() for t in fig.texts] == ["t", "a", "b"]  # 16-pixel cells: no captions
    width, height = pictures.grid_size(2, 2, 16, title_lines=1, captions=True)
    assert (width, height) == (pictures.MIN_WIDTH, pictures.TITLE_LINE + 8 + 2 * (44 + 2))
    assert fig.get_size_inches() * fig.dpi == pytest.approx([width, height])


def test_grid_refuses_labels_of_another_count() -> None:
    images, _ = _grid_inputs()
    with pytest.raises(ConfigError, match="row_labels") as err:
        pictures.activation_grid(images, ["a", "b"], "t")
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="image_labels"):
        pictures.activation_grid(images, ["a", "b", "c"], "t", [["x"] * 3] * 3)
    with pytest.raises(ConfigError, match="images"):
        pictures.activation_grid(images[..., 0], ["a", "b", "c"], "t")


def test_every_figure_writes_valid_pdf_and_svg_beside_the_png(tmp_path: Path) -> None:
    z = torch.rand(20, 6)
    written = [
        pictures.heatmap(z, tmp_path / "heat.png", "t", "x", "y", formats=["png", "pdf", "svg"]),
        pictures.correlation(z, tmp_path / "corr.png", "t", formats=["png", "pdf", "svg"]),
        pictures.ea_curve(z.mean(0), tmp_path / "ea.png", "t", formats=["png", "pdf", "svg"]),
        pictures.accuracy_vs_k(
            {"EA": ([1, 2, 4], [0.1, 0.2, 0.3])}, tmp_path / "acc.png", "t", ["png", "pdf", "svg"]
        ),
    ]
    for png in written:
        assert png.suffix == ".png"
        with Image.open(png) as im:
            assert im.size == (640, 480)
        for suffix in (".pdf", ".svg"):
            assert_valid_vector(png.with_suffix(suffix))
    images, _ = _grid_inputs()
    fig = pictures.activation_grid(images, ["a", "b", "c"], "NCL title")
    files = save_figure(fig, tmp_path / "grid.png", ["svg", "pdf"])
    assert [f.name for f in files] == ["grid.svg", "grid.pdf"]
    assert not (tmp_path / "grid.png").exists()
    for f in files:
        assert_valid_vector(f)
    assert b"NCL title" in files[0].read_bytes()  # SVG text stays text (svg.fonttype none)


def test_curves_write_vector_files_beside_the_image(tmp_path: Path) -> None:
    csv = tmp_path / "run" / "version_0" / "metrics.csv"
    csv.parent.mkdir(parents=True)
    csv.write_text("epoch,step,train/loss\n0,0,2.0\n0,1,1.5\n1,2,1.0\n")
    out = tmp_path / "curves.png"
    draw_curves(load_runs([tmp_path / "run"]), out, formats=["png", "pdf", "svg"])
    assert out.is_file()
    for suffix in (".pdf", ".svg"):
        assert_valid_vector(out.with_suffix(suffix))
    with pytest.raises(ConfigError, match="formats"):
        draw_curves(load_runs([tmp_path / "run"]), tmp_path / "c2.png", formats=["eps"])
    assert not (tmp_path / "c2.png").exists()  # refused before drawing


def test_no_global_matplotlib_state_changes(tmp_path: Path) -> None:
    before = dict(matplotlib.rcParams)
    images, _ = _grid_inputs()
    fig = pictures.activation_grid(images, ["a", "b", "c"], "t")
    save_figure(fig, tmp_path / "g.png", ["png", "pdf", "svg"])
    pictures.heatmap(torch.rand(4, 4), tmp_path / "h.png", "t", "x", "y")
    assert dict(matplotlib.rcParams) == before
    with figure_style():
        assert matplotlib.rcParams["svg.fonttype"] == "none"
        assert matplotlib.rcParams["pdf.fonttype"] == 42
    assert isinstance(fig.canvas, FigureCanvasAgg)  # files only: no pyplot, no display


@pytest.mark.parametrize(
    ("formats", "message"),
    [([], "formats: give at least one of png, pdf, svg"),
     ("pdf", "formats: give a list of formats, e.g. ['pdf'], not a string"),
     (["png", "eps"], "formats must be one of 'png', 'pdf', 'svg', got 'eps'")],
)  # fmt: skip
def test_formats_are_checked_with_one_line_naming_the_key(formats, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        check_formats(formats)
    assert str(err.value) == message and err.value.key == "formats"
    assert check_formats(["svg", "png", "svg"]) == ("svg", "png")
    assert style.FORMATS == ("png", "pdf", "svg")
