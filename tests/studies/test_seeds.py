"""``python -m ncl_lightning.studies.seeds``: cells, the mean ± std report, resume, errors."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from concurrent.futures import Executor, Future
from functools import partial
from pathlib import Path

import pytest

from ncl_lightning.atlas import read_atlas
from ncl_lightning.foundation.errors import ConfigError, RunFailedError
from ncl_lightning.foundation.resources import config_path
from ncl_lightning.studies import landscape, seeds
from ncl_lightning.studies.study_defs import COLUMNS, STUDIES, Row, Study, grids_and_atlas
from tests.conftest import ROOT
from tests.helpers.tools import refused


class InlineExecutor(Executor):
    """The study's pool of cell threads, each cell run at once on this (the main) thread:
    ``ncl-cli fit`` installs its signal handlers, which only the main thread can."""

    def __init__(self, workers: int) -> None:
        self.workers = workers

    def submit(self, fn, /, *args, **kwargs) -> Future:
        future: Future = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as err:
            future.set_exception(err)
        return future


def run_cell_here(command: list[str], log, env) -> int:
    """``run_child`` of a cell's ``python -m ncl_lightning.entry fit ...``, here: the same
    entry point and arguments, its output in the cell's ``fit.log``; its exit status."""
    from ncl_lightning.entry import main

    assert command[1:3] == ["-m", "ncl_lightning.entry"], command
    with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        try:
            main(command[3:])
        except SystemExit as exited:
            return exited.code if isinstance(exited.code, int) else 1
    return 0


@pytest.fixture
def cells_in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """The study's cells fitted in this process (``ncl_lightning.entry.main``), one after
    the other, not in a subprocess each (~10 s of imports a cell);
    ``test_a_failing_cell_names_its_row_seed_and_log`` keeps the real subprocess (its exit
    status and log)."""
    monkeypatch.setattr(seeds, "run_child", run_cell_here)
    monkeypatch.setattr(seeds, "ThreadPoolExecutor", InlineExecutor)


TINY = (
    "--trainer.max_epochs=1",
    "--trainer.limit_train_batches=2",
    "--trainer.check_val_every_n_epoch=1",
)


def _records(values: dict[str, list[dict[str, float]]]) -> list[dict]:
    return [
        {"row": row, "seed": seed, "seconds": 60.0, "metrics": metrics, "curves": {}}
        for row, per_seed in values.items()
        for seed, metrics in enumerate(per_seed)
    ]


COLUMNS_OF_DEMO = STUDIES.get("demo")().columns
STUDY = Study(
    "constructed",
    (Row("A", "demo/digits_cl.yaml"), Row("B", "demo/digits_ncl.yaml"), Row("C", "x.yaml")),
    ("val/z/semantic_consistency", "val/online_acc"),
)


def test_report_is_mean_and_sample_std_per_row_with_the_per_seed_values() -> None:
    a, b = [10.0, 12.0, 14.0], [30.0, 31.0, 35.0]
    acc_a, acc_b = [0.90, 0.92, 0.94], [0.91, 0.95, 0.93]
    records = _records(
        {
            "A": [
                {"val/z/semantic_consistency": c, "val/online_acc": x}
                for c, x in zip(a, acc_a, strict=True)
            ],
            "B": [
                {"val/z/semantic_consistency": c, "val/online_acc": x}
                for c, x in zip(b, acc_b, strict=True)
            ],
        }
    )
    text = seeds.report(records, STUDY)
    # Reference: the sample standard deviation (n - 1), as the docs' tables use.
    line_a = next(line for line in text.splitlines() if line.startswith("| A |"))
    assert f"{statistics.fmean(a):.1f} ± {statistics.stdev(a):.1f}" in line_a  # 12.0 ± 2.0
    assert f"{100 * statistics.fmean(acc_a):.1f} ± {100 * statistics.stdev(acc_a):.1f}" in line_a
    assert "| C | 0 | n/a | n/a |" in text  # a row without runs is reported, not dropped
    one = seeds.report(_records({"A": [{"val/online_acc": 0.5}]}), STUDY)
    assert "| A | 1 | n/a | 50.0 |" in one  # one seed: the value, no ± 0.0
    assert "semantic consistency: A 10.0 / 12.0 / 14.0; B 30.0 / 31.0 / 35.0" in text


def test_a_metric_undefined_on_a_seed_is_reported_undefined_and_never_a_difference() -> None:
    """Semantic consistency is NaN when the gate switched every dimension off (the BayesNCL
    sensitivity study at a small ρ): the row reads "undefined", the per-seed values show
    the NaN, and no spread line names it (the report used to fail on the NaN)."""
    nan = float("nan")
    records = _records(
        {
            "A": [{"val/z/semantic_consistency": c, "val/online_acc": 0.5} for c in (nan, 20.0)],
            "B": [{"val/z/semantic_consistency": c, "val/online_acc": 0.9} for c in (60.0, 62.0)],
        }
    )
    text = seeds.report(records, STUDY)
    assert "| A | 2 | undefined | 50.0 ± 0.0 |" in text
    assert "semantic consistency: A nan / 20.0; B 60.0 / 62.0" in text
    beyond = text.split("Differences that exceed the spread")[1]
    assert "semantic consistency" not in beyond
    assert "- online linear acc (%): B 90.0 ± 0.0 > A 50.0 ± 0.0" in beyond


def test_exceeding_lists_exactly_the_pairs_whose_intervals_do_not_overlap() -> None:
    values = {
        "A": {"val/z/semantic_consistency": [10.0, 12.0, 14.0], "val/online_acc": [0.9] * 3},
        "B": {"val/z/semantic_consistency": [30.0, 31.0, 35.0], "val/online_acc": [0.9] * 3},
        "C": {"val/z/semantic_consistency": [13.0, 15.0, 17.0], "val/online_acc": []},
    }
    lines = seeds.exceeding(values, STUDY)
    # Slow reference: every pair, |mean difference| > std + std.
    expected = set()
    for key in STUDY.columns:
        for x, y in (("A", "B"), ("A", "C"), ("B", "C")):
            vx, vy = values[x][key], values[y][key]
            if len(vx) > 1 and len(vy) > 1:
                gap = abs(statistics.fmean(vx) - statistics.fmean(vy))
                if gap > statistics.stdev(vx) + statistics.stdev(vy):
                    expected.add((key, frozenset((x, y))))
    assert {("val/z/semantic_consistency", frozenset(p)) for p in (("A", "B"), ("B", "C"))} == (
        expected
    )
    assert len(lines) == len(expected)
    assert any(
        line.startswith("semantic consistency: B 32.0 ± 2.6 > A 12.0 ± 2.0") for line in lines
    )
    # A and C overlap (12 ± 2 against 15 ± 2): not listed; equal accuracies: not listed.
    assert not any(" A " in line and " C " in line for line in lines)


def test_with_a_baseline_only_pairs_with_the_baseline_are_compared() -> None:
    study = Study(STUDY.title, STUDY.rows, STUDY.columns, baseline="A")
    values = {
        "A": {"val/z/semantic_consistency": [10.0, 11.0, 12.0], "val/online_acc": []},
        "B": {"val/z/semantic_consistency": [50.0, 51.0, 52.0], "val/online_acc": []},
        "C": {"val/z/semantic_consistency": [90.0, 91.0, 92.0], "val/online_acc": []},
    }
    lines = seeds.exceeding(values, study)
    assert len(lines) == 2 and all("A 11.0" in line for line in lines)  # not B against C


def test_cells_name_every_config_the_seed_and_the_seed_keys(tmp_path: Path) -> None:
    study = STUDIES.get("ablation-digits")()
    cells = seeds.cells_of(study, [0, 5], tmp_path, ["--trainer.max_epochs=1"])
    assert len(cells) == 2 * len(study.rows)
    soft = next(c for c in cells if c.row == "soft gate" and c.seed == 5)
    args = soft.command
    configs = [args[i + 1] for i, a in enumerate(args) if a == "--config"]
    assert configs == [
        str(config_path("demo/digits_bayesncl.yaml")),
        str(config_path("ablations/soft_gate.yaml")),
    ]
    assert args[args.index("--seed_everything") + 1] == "5"
    assert args[-1] == "--trainer.max_epochs=1"
    assert soft.root == tmp_path / "runs" / "soft_gate" / "seed_5"
    dsprites = seeds.cells_of(STUDIES.get("dsprites")(), [3], tmp_path, [])[0].command
    assert dsprites[dsprites.index("--data.init_args.seed") + 1] == "3"


def test_every_registered_study_names_existing_configs_and_known_columns() -> None:
    for name in STUDIES.names:
        study = STUDIES.get(name)()
        assert set(study.columns) <= set(COLUMNS), name
        assert set(study.paper) <= {row.name for row in study.rows}, name
        assert study.baseline in (None, *(row.name for row in study.rows)), name
        for row in study.rows:
            for config in (row.config, *row.overlays):
                assert config_path(config).is_file(), (name, config)


def test_bad_arguments_fail_in_one_line_before_any_run(tmp_path: Path, capsys) -> None:
    with pytest.raises(ConfigError, match="unknown study 'demos'"):
        seeds.run_study("demos", tmp_path)
    with pytest.raises(ConfigError, match="--workers must be an integer >= 1"):
        seeds.run_study("demo", tmp_path, workers=0)
    with pytest.raises(ConfigError, match="at least one seed"):
        seeds.run_study("demo", tmp_path, seeds=[])
    with pytest.raises(ConfigError, match=r"unknown row\(s\) \['SimCLR'\]"):
        seeds.run_study("demo", tmp_path, rows=["NCL", "SimCLR"])
    assert "unknown study 'nope'" in refused(
        seeds.main, ["nope", "--out", str(tmp_path)], seeds.PROG, tmp_path, capsys
    )
    assert not any(tmp_path.iterdir())  # nothing written


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["nope"], "study: unknown study 'nope'; valid names: ablation-digits,"),
        (["demo", "--rows", "NCL", "SimCLR"], "--rows: unknown row(s) ['SimCLR']"),
        (["demo", "--seeds"], "--seeds: expected at least one argument"),
        (["demo", "--seeds", "0", "1", "0"], "--seeds: seed(s) [0] given twice"),
        (["demo", "--seeds", "-1"], "--seeds must be an integer >= 0, got -1"),
        (["demo", "--seeds", "one"], "--seeds: invalid int value: 'one'"),
        (["demo", "--workers", "0"], "--workers must be an integer >= 1, got 0"),
        (["demo", "--threads", "-2"], "--threads must be an integer >= 1, got -2"),
        (["demo", "--run-arg=2"], "--run-arg: '2' is not an option"),
        (
            ["demo", "--run-arg=--trainer.default_root_dir=/tmp/x"],
            "--run-arg: --trainer.default_root_dir=/tmp/x would change "
            "trainer.default_root_dir, which the study sets for each cell",
        ),
        (["demo", "--run-arg=--seed_everything=3"], "would change seed_everything"),
        (
            ["demo", "--run-arg=--trainer.logger.init_args.name=x"],
            "would change trainer.logger, which the study sets for each cell (the CSV log",
        ),
        (["dsprites", "--run-arg=--data.init_args.seed=1"], "would change data.init_args.seed"),
        (
            ["demo", "--run-arg=--config", "--run-arg={tmp}/none.yaml"],
            "--run-arg: {tmp}/none.yaml: config file not found",
        ),
        (
            ["demo", "--run-arg=--config={tmp}/overlay.yaml"],
            "--run-arg: --config={tmp}/overlay.yaml (its trainer.default_root_dir) would "
            "change trainer.default_root_dir",
        ),
        (["demo", "--out", "{tmp}/afile"], "--out: {tmp}/afile is a file, not a folder"),
        (["demo", "--out", "{tmp}/afile/study"], "--out: {tmp}/afile/study: {tmp}/afile is"),
    ],
)
def test_every_argument_is_checked_before_any_cell(
    tmp_path: Path, capsys: pytest.CaptureFixture, args: list[str], expected: str
) -> None:
    (tmp_path / "afile").write_text("not a folder")
    (tmp_path / "overlay.yaml").write_text("trainer:\n  default_root_dir: /tmp/elsewhere\n")
    argv = [a.format(tmp=tmp_path) for a in args]
    if "--out" not in argv:
        argv += ["--out", str(tmp_path / "study")]
    message = refused(seeds.main, argv, seeds.PROG, tmp_path, capsys)
    assert expected.format(tmp=tmp_path) in message


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--variants", "SimCLRR"], "--variants: unknown variant(s) ['SimCLRR']; choose from"),
        (["--sparsity", "0"], "--sparsity must be in (0, 1], got 0.0"),
        (["--sparsity", "nan"], "--sparsity must be in (0, 1], got nan"),
        (["--seeds", "0"], "--seeds must be an integer >= 1, got 0"),
        (["--workers", "0"], "--workers must be an integer >= 1, got 0"),
        (
            ["--run-arg=--data.init_args.nonzero_prob=0.5"],
            "would change data.init_args.nonzero_prob",
        ),
        (["--out", "{tmp}/afile"], "--out: {tmp}/afile is a file, not a folder"),
        (["--verbose=yes"], "--verbose: ignored explicit argument 'yes'"),
    ],
)
def test_landscape_checks_every_argument_before_any_run(
    tmp_path: Path, capsys: pytest.CaptureFixture, args: list[str], expected: str
) -> None:
    (tmp_path / "afile").write_text("not a folder")
    argv = [a.format(tmp=tmp_path) for a in args]
    if "--out" not in argv:
        argv += ["--out", str(tmp_path / "landscape")]
    message = refused(landscape.main, argv, landscape.PROG, tmp_path, capsys)
    assert expected.format(tmp=tmp_path) in message


@pytest.mark.slow
@pytest.mark.usefixtures("cells_in_process")
def test_a_study_runs_its_cells_writes_the_table_and_resumes(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    rows = STUDIES.get("demo")().rows[::2]  # CL, BayesNCL
    study = Study("two methods", rows, COLUMNS_OF_DEMO, after=partial(grids_and_atlas, rows=None))
    text = seeds.run_study(study, out, seeds=[0], workers=2, extra=TINY)
    records = json.loads((out / "results.json").read_text())
    assert sorted((r["row"], r["seed"]) for r in records) == [("BayesNCL", 0), ("CL", 0)]
    assert (out / "table.md").read_text().endswith(text.split("\n\n", 1)[1])
    # Resume: finished cells are read back, not trained again.
    logs = {p: p.stat().st_mtime_ns for p in out.rglob("fit.log")}
    seeds.run_study(study, out, seeds=[0], workers=1, extra=TINY)
    assert {p: p.stat().st_mtime_ns for p in out.rglob("fit.log")} == logs
    # A cell killed before it wrote its record trains again in a fresh folder (it would be
    # refused as an existing run), the unfinished attempt kept aside, never read.
    cl0 = out / "runs" / "cl" / "seed_0"
    (cl0 / "result.json").unlink()
    seeds.run_study(study, out, seeds=[0], workers=1, extra=TINY, rows=["CL"])
    assert (cl0 / "logs.unfinished-1" / "version_0" / "checkpoints" / "last.ckpt").is_file()
    record = json.loads((cl0 / "result.json").read_text())
    assert record["checkpoint"] == str(cl0 / "logs" / "version_0" / "checkpoints" / "last.ckpt")
    assert not list(cl0.rglob("last-v*.ckpt"))
    # A finished cell is never reused for other settings.
    with pytest.raises(ConfigError, match="cl/seed_0: finished with another config or other"):
        other = (*TINY, "--trainer.limit_val_batches=1")
        seeds.run_study(study, out, seeds=[0], workers=1, extra=other, rows=["CL"])
    # One more seed of one row: only that cell runs; the table covers every finished cell.
    seeds.run_study(study, out, seeds=[1], workers=1, extra=TINY, rows=["CL"])
    assert len(list(out.rglob("fit.log"))) == len(logs) + 1
    records = json.loads((out / "results.json").read_text())
    assert sorted((r["row"], r["seed"]) for r in records) == [
        ("BayesNCL", 0), ("CL", 0), ("CL", 1)
    ]  # fmt: skip
    for record in records:
        metrics = record["metrics"]
        assert 0.0 <= metrics["val/online_acc"] <= 1.0
        assert metrics["val/z/active_dims"] <= 64
        assert (Path(record["checkpoint"])).is_file()
    cl = [r["metrics"] for r in records if r["row"] == "CL"]
    assert all(m["val/z/sparsity"] < 0.05 for m in cl)  # dense CL features
    assert "val/gate/open_rate" in next(r for r in records if r["row"] == "BayesNCL")["metrics"]
    command = (out / "runs" / "cl" / "seed_1" / "command.txt").read_text()
    assert "--seed_everything 1" in command and "digits_cl.yaml" in command
    table = (out / "table.md").read_text()
    assert "| CL | 2 |" in table and " ± " in table and "| BayesNCL | 1 |" in table
    # The after-hook: the atlas of the first seed's checkpoints, both methods in it.
    atlas = read_atlas(out / "atlas" / "index.html")
    assert [m["name"] for m in atlas["models"]] == ["CL", "BayesNCL"]
    # A study moved whole keeps its finished cells.
    moved = out.rename(tmp_path / "moved")
    logs = {p: p.stat().st_mtime_ns for p in moved.rglob("fit.log")}
    seeds.run_study(study, moved, seeds=[0, 1], workers=1, extra=TINY, rows=["CL"])
    assert {p: p.stat().st_mtime_ns for p in moved.rglob("fit.log")} == logs


@pytest.mark.slow
def test_a_failing_cell_names_its_row_seed_and_log(
    tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One failing cell, from the command line: ``run_study`` raises a RunFailedError
    naming the row, seed and log (no result written), which is one line, no traceback."""
    raised: list[BaseException] = []
    run_study = seeds.run_study

    def recording(*args, **kwargs):
        try:
            return run_study(*args, **kwargs)
        except BaseException as err:
            raised.append(err)
            raise

    monkeypatch.setattr(seeds, "run_study", recording)
    argv = ["demo", "--rows", "CL", "--seeds", "0", "--out", str(tmp_path)]
    with pytest.raises(SystemExit) as exited:
        seeds.main([*argv, "--run-arg=--trainer.max_epochs=-5"])
    (error,) = raised
    assert isinstance(error, RunFailedError)
    assert re.search(r"CL seed 0 failed .*fit\.log", str(error)), error
    assert not (tmp_path / "runs" / "cl" / "seed_0" / "result.json").exists()
    assert exited.value.code == 1  # a fault while working, not bad input
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].endswith("fit.log"), err
    assert err[0].startswith(f"{seeds.PROG}: error: CL seed 0 failed (exit 2): ncl-cli: error: ")
    assert "max_epochs" in err[0] and "-5" in err[0]  # Lightning's refusal


def test_means_equal_at_the_shown_precision_are_not_a_difference() -> None:
    # Dense features: a sparsity of 0.0001 against 0.0 is float noise, both shown as 0.0 %.
    values = {
        "A": {"val/z/semantic_consistency": [10.0] * 3, "val/online_acc": [1e-6] * 3},
        "B": {"val/z/semantic_consistency": [10.04] * 3, "val/online_acc": [0.0] * 3},
        "C": {"val/z/semantic_consistency": [10.1] * 3, "val/online_acc": [0.0] * 3},
    }
    lines = seeds.exceeding(values, STUDY)
    assert lines == [  # A against B: 10.0 and 10.04 are both shown as 10.0
        "semantic consistency: C 10.1 ± 0.0 > A 10.0 ± 0.0",
        "semantic consistency: C 10.1 ± 0.0 > B 10.0 ± 0.0",
    ]


def test_sensitivity_studies_give_each_row_its_value_after_the_configs(tmp_path: Path) -> None:
    """The BayesNCL sweeps: one row per value, the value typed after every ``--config``
    (so it wins over the files), the paper's value the baseline."""
    for name, key, paper in (
        ("sensitivity-prior-digits", "prior", "0.8"),
        ("sensitivity-kl-digits", "kl_weight", "3.0e-05"),
        ("sensitivity-kl-sparse-digits", "kl_weight", "3.0e-05"),
    ):
        study = STUDIES.get(name)()
        assert len(study.rows) >= 3 and study.baseline is not None
        assert study.baseline.endswith(paper)
        values = []
        for cell in seeds.cells_of(study, [0], tmp_path, []):
            command = cell.command
            at = command.index(f"--model.init_args.{key}")
            last_config = max(i for i, a in enumerate(command) if a == "--config")
            assert at > last_config, command
            values.append(float(command[at + 1]))
        assert len(set(values)) == len(study.rows) and float(paper) in values


@pytest.mark.slow
def test_a_stop_signal_to_the_study_stops_its_running_cell(tmp_path: Path) -> None:
    """SIGTERM to the study's process (what a scheduler sends its pid) reaches the cell it
    is running: the cell saves its last checkpoint and ends, then the study ends (exit 1,
    naming the stopped cell). It used to die alone and leave the cell training."""
    out = tmp_path / "study"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "ncl_lightning.studies.seeds", "demo", "--rows", "CL",
           "--seeds", "0", "--out", str(out), "--run-arg=--trainer.max_epochs=1000"]  # fmt: skip
    study = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True)
    ckpt_dir = out / "runs" / "cl" / "seed_0" / "logs" / "version_0" / "checkpoints"
    deadline = time.monotonic() + 300
    while not (ckpt_dir / "last.ckpt").exists():  # the cell is training
        assert study.poll() is None, study.communicate()[1][-3000:]
        if time.monotonic() > deadline:
            study.kill()
            pytest.fail("the cell never saved its first epoch")
        time.sleep(0.2)
    study.send_signal(signal.SIGTERM)
    try:
        _, err = study.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        study.kill()
        raise
    assert study.returncode == 1, err[-3000:]
    assert "CL seed 0 failed (exit 143): ncl-cli: stopped by SIGTERM" in err, err[-3000:]
    running = subprocess.run(["pgrep", "-f", str(out)], capture_output=True, text=True)
    assert running.stdout.strip() == "", "the cell outlived the study"
