"""``ncl_lightning.plot`` on real CSV runs: the reader, the panels, the figure and the PNG."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from PIL import Image

from ncl_lightning.plot import (
    DEFAULT_PANELS,
    choose_panels,
    curves_figure,
    figure_size,
    load_runs,
    plot_curves,
    read_metrics,
)
from ncl_lightning.plot.__main__ import main


def hand_parse(path: Path) -> dict[str, list[tuple[int, int, float]]]:
    """Slow reference: split each line on commas, keep the non-empty cells per column."""
    lines = path.read_text(encoding="utf-8").splitlines()
    header = lines[0].split(",")
    out: dict[str, list[tuple[int, int, float]]] = {}
    for line in lines[1:]:
        cells = dict(zip(header, line.split(","), strict=True))
        for column, cell in cells.items():
            if column not in ("epoch", "step") and cell:
                point = (int(cells["step"]), int(cells["epoch"]), float(cell))
                out.setdefault(column, []).append(point)
    return out


def same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


def assert_reads_like_reference(path: Path) -> None:
    got, want = read_metrics(path), hand_parse(path)
    assert sorted(got) == sorted(want)
    for column, points in want.items():
        assert [(p.step, p.epoch) for p in got[column]] == [(s, e) for s, e, _ in points]
        assert all(same(p.value, v) for p, (_, _, v) in zip(got[column], points, strict=True))


def metrics_csvs(runs: list[Path]) -> list[Path]:
    return [next(run.rglob("metrics.csv")) for run in runs]


@pytest.mark.slow  # the csv_runs fixture: two 2-epoch digits fits (~6 s idle)
def test_reader_matches_hand_parse_on_real_runs(csv_runs: list[Path]) -> None:
    for path in metrics_csvs(csv_runs):
        assert_reads_like_reference(path)
        series = read_metrics(path)
        # Lightning leaves validation cells empty on training rows: far fewer points
        assert len(series["val/online_acc"]) == 2  # one per epoch
        assert len(series["train/loss"]) == 4  # 2 epochs x 2 steps, log_every_n_steps=1


def test_reader_on_sparse_columns_with_nan(tmp_path: Path) -> None:
    path = tmp_path / "metrics.csv"
    path.write_text(
        "epoch,step,train/loss,val/knn_acc,never\n"
        "0,0,2.5,,\n"
        "0,1,nan,,\n"
        "0,1,,0.5,\n"
        "1,2,1.5,,\n"
        "1,3,,0.75,\n"
    )
    assert_reads_like_reference(path)
    series = read_metrics(path)
    assert "never" not in series  # a column never filled is not a curve
    assert [p.step for p in series["val/knn_acc"]] == [1, 3]
    assert math.isnan(series["train/loss"][1].value)


def expected_panels(paths: list[Path]) -> list[str]:
    """The default panels, from the raw headers: columns with at least one filled cell."""
    filled = {c for p in paths for c in hand_parse(p)}
    lr = sorted(c for c in filled if c.startswith("lr-"))
    return [c for name in DEFAULT_PANELS for c in (lr if name == "lr" else [name]) if c in filled]


@pytest.mark.slow  # the csv_runs fixture: two 2-epoch digits fits (~6 s idle)
def test_panels_are_the_logged_default_columns(csv_runs: list[Path]) -> None:
    runs = load_runs(csv_runs)
    panels = choose_panels(runs)
    assert panels == expected_panels(metrics_csvs(csv_runs))
    assert panels[0] == "train/loss" and "val/gate/open_rate" in panels
    # NCL alone has no gate
    assert "val/gate/open_rate" not in choose_panels(runs[:1])
    chosen = choose_panels(runs, ["val/knn_acc", "train/objective", "val/knn_acc"])
    assert chosen == ["val/knn_acc", "train/objective"]


@pytest.mark.slow  # the csv_runs fixture: two 2-epoch digits fits (~6 s idle)
def test_figure_has_one_line_per_run_on_each_panel(csv_runs: list[Path]) -> None:
    runs = load_runs(csv_runs)
    assert [r.label for r in runs] == ["digits_ncl", "digits_bayesncl"]
    panels = choose_panels(runs)
    fig = curves_figure(runs, panels)
    assert [ax.get_title() for ax in fig.axes] == panels
    for ax, column in zip(fig.axes, panels, strict=True):
        logged = [r.label for r in runs if column in r.series]
        assert [line.get_label() for line in ax.lines] == logged, column
        assert ax.get_xlabel().startswith("step")
    loss = fig.axes[0].lines[0]
    steps = [p.step for p in runs[0].series["train/loss"]]
    assert list(loss.get_xdata()) == steps
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend == ["digits_ncl", "digits_bayesncl"]
    width, height = figure_size(len(panels))
    assert (fig.get_figwidth() * fig.dpi, fig.get_figheight() * fig.dpi) == (width, height)


@pytest.mark.slow  # the csv_runs fixture: two 2-epoch digits fits (~6 s idle)
def test_epoch_axis_averages_each_epoch(csv_runs: list[Path]) -> None:
    runs = load_runs(csv_runs[:1])
    fig = curves_figure(runs, ["train/loss"], x="epoch")
    line = fig.axes[0].lines[0]
    points = hand_parse(metrics_csvs(csv_runs)[0])["train/loss"]
    want = [sum(v for _, e, v in points if e == epoch) / 2 for epoch in (0, 1)]
    assert list(line.get_xdata()) == [0.0, 1.0]
    assert list(line.get_ydata()) == pytest.approx(want, rel=1e-12)
    assert fig.axes[0].get_xlabel().startswith("epoch")


@pytest.mark.slow  # the csv_runs fixture: two 2-epoch digits fits (~6 s idle)
def test_plot_curves_writes_png_of_the_figure_size(csv_runs: list[Path], tmp_path: Path) -> None:
    out = tmp_path / "sub" / "curves.png"
    assert plot_curves(csv_runs, out, labels=["NCL", "BayesNCL"]) == out
    panels = choose_panels(load_runs(csv_runs))
    with Image.open(out) as image:
        image.verify()
    with Image.open(out) as image:
        assert image.format == "PNG"
        assert image.size == figure_size(len(panels))  # 6 panels -> 3 x 2 of 400 x 300 px
    assert figure_size(6) == (1200, 600) and figure_size(2) == (800, 300)


@pytest.mark.slow  # the csv_runs fixture: two 2-epoch digits fits (~6 s idle)
def test_command_line(csv_runs: list[Path], tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "c.png"
    main([*map(str, csv_runs), "--out", str(out), "--metrics", "train/loss", "val/z/sparsity"])
    printed = capsys.readouterr().out
    assert printed.startswith(f"{out}: 2 run(s) (digits_ncl, digits_bayesncl), x = step")
    assert printed.rstrip().endswith("panels: train/loss, val/z/sparsity")
    with Image.open(out) as image:
        assert image.size == figure_size(2)
    version = next(csv_runs[0].rglob("metrics.csv")).parent  # a version folder works too
    main([str(version), "--out", str(tmp_path / "v.png"), "--x", "epoch"])
    assert "1 run(s) (digits_ncl), x = epoch" in capsys.readouterr().out


def test_figure_on_written_csvs(tmp_path: Path) -> None:
    """The fast twin of the real-run tests: two hand-written runs, the gate in one only."""
    texts = {
        "cl": "epoch,step,train/loss,val/online_acc\n0,0,2.0,\n0,1,,0.5\n1,2,1.0,\n",
        "bayes": "epoch,step,train/loss,val/online_acc,val/gate/open_rate\n"
        "0,0,2.0,,\n0,1,,0.5,0.4\n1,2,1.0,,\n",
    }
    paths = []
    for name, text in texts.items():
        (tmp_path / name / "version_0").mkdir(parents=True)
        (tmp_path / name / "version_0" / "metrics.csv").write_text(text)
        paths.append(tmp_path / name)
    runs = load_runs(paths)
    for run in runs:
        assert_reads_like_reference(run.path)
    panels = choose_panels(runs)
    assert panels == ["train/loss", "val/online_acc", "val/gate/open_rate"]
    fig = curves_figure(runs, panels)
    assert [len(ax.lines) for ax in fig.axes] == [2, 2, 1]
    assert [line.get_label() for line in fig.axes[2].lines] == ["bayes"]


def test_help_names_csv_and_wandb_runs(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "offline W&B run" in text and "metrics.csv" in text and "--all" in text
