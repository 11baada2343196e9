"""The benchmark runs end to end on small data (its figures are measured, never asserted)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch

from benchmarks import BENCHMARKS, format_table
from benchmarks.__main__ import main
from benchmarks.metrics import run
from tests.conftest import subset_copy


@pytest.fixture(scope="module")
def cifar_small(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first 8 training (2 validation) images of every class of the real CIFAR-10
    subset: 10 batches of 8, enough for every step of the small runs here; decoded in a
    fraction of the whole subset's time (each fit decodes its data again)."""
    return subset_copy(tmp_path_factory.mktemp("cifar_small"), 8, 2)


@pytest.mark.slow
def test_metrics_benchmark_produces_every_row_on_small_data() -> None:
    rows = run(repeats=1, num_samples=600, num_features=24)
    table = format_table(rows)
    for what in ("SEPIN", "loop", "retrieval", "SemanticEntropy", "EffectiveRank"):
        assert what in table
    assert all(row.seconds >= 0 for row in rows)


def test_unknown_benchmark_name_is_refused_before_work(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as err:
        main(["nonesuch"])
    assert err.value.code == 2
    assert "valid names: " + ", ".join(BENCHMARKS) in capsys.readouterr().err
    with pytest.raises(SystemExit) as err:  # it ran the default number before
        main(["metrics", "--repeats", "0"])
    assert err.value.code == 2
    assert "--repeats must be an integer >= 1, got 0" in capsys.readouterr().err


@pytest.mark.slow
def test_step_ratio_benchmark_times_ncl_and_bayesncl_on_small_batches() -> None:
    """``step-ratio`` (the module ``step``; ``step`` is now the per-part report)."""
    from benchmarks.step import run as run_step

    assert {"step", "step-ratio"} <= set(BENCHMARKS)

    ncl, bayes = run_step(repeats=1, batch_size=4, image_size=8)
    assert ncl.what.startswith("NCL") and bayes.what.startswith("BayesNCL")
    assert bayes.goal == 1.10 * ncl.seconds and "ratio" in bayes.note


@pytest.mark.slow
def test_throughput_benchmark_reports_both_pipelines_and_ratios(
    cifar_small, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture
) -> None:
    """Every method, step mode and pipeline gets an (a) row with its ratio to (b); small and
    fast here (a small CNN, batch 8; the captured bare row is left out: compiling is slow
    on a CPU), the real data path and Trainer all the same. Run through
    ``python -m benchmarks``: progress lines, no Lightning banners, and the
    Lightning log level is the same after the run as before it. The modes of the ``cpu``
    pipeline are chosen apart (the GPU script runs ``eager`` and ``graphs`` there)."""
    from benchmarks import throughput
    from ncl_lightning.nn import SmallCNN

    def small_model(name: str, settings: dict, num_classes: int = 10, step_mode: str = "eager"):
        return throughput.METHODS[name](
            SmallCNN(3, 4, 16),
            proj_hidden_dim=16,
            proj_output_dim=8,
            num_classes=num_classes,
            batch_size=throughput.BATCH_SIZE,
            channels_last=settings["channels_last"],
            torch_compile=settings["torch_compile"],
            step_mode=step_mode,
        )

    monkeypatch.setattr(throughput, "make_model", small_model)
    monkeypatch.setattr(throughput, "BATCH_SIZE", 8)
    monkeypatch.setattr(throughput, "TIMED_STEPS", 2)
    monkeypatch.setattr(throughput, "CAPTURED_WARMUP", 1)
    monkeypatch.setenv("NCL_BENCH_DATA", str(cifar_small))
    monkeypatch.setenv("NCL_BENCH_MODES", "eager,graphs")
    monkeypatch.setenv("NCL_BENCH_CPU_PIPELINE_MODES", "eager")
    monkeypatch.setenv("NCL_BENCH_BARE", "eager")
    monkeypatch.setenv("NCL_BENCH_CALL_STEPS", "1")
    monkeypatch.setenv("NCL_BENCH_PRECISION", "32-true")
    results: list = []
    real_run = throughput.run

    def run_and_keep(repeats: int) -> list:
        results.append(real_run(repeats))
        return results[-1]

    monkeypatch.setattr(throughput, "run", run_and_keep)
    lightning_logger = logging.getLogger("lightning.pytorch")
    level = lightning_logger.level
    lightning_logger.setLevel(logging.INFO)
    try:
        assert main(["throughput", "--repeats", "1"]) == 0
        assert lightning_logger.level == logging.INFO  # restored: no leak into later tests
    finally:
        lightning_logger.setLevel(level)
    output = capfd.readouterr()
    assert "[bench 1/1] throughput | elapsed " in output.err
    for k in range(1, 10):  # (2 device modes + 1 cpu mode) x 3 methods x 1 round
        assert f"[throughput {k}/9] (a) " in output.err
    assert "[throughput 9/9] done in " in output.err and "| ETA " in output.err
    assert "[bench] 1/1 done in " in output.err
    for banner in ("GPU available", "LOCAL_RANK", "`Trainer.fit` stopped", "Seed set"):
        assert banner not in output.out + output.err
    assert "## throughput" in output.out and "[bench" not in output.out
    (rows,) = results
    assert rows[0].what.startswith("(b) bare") and "img/s" in rows[0].note
    assert not any("FAILED" in row.note for row in rows)
    full = [row.what for row in rows[1:]]
    configs = [("device", "eager"), ("device", "graphs"), ("cpu", "eager")]
    assert len(full) == len(configs) * len(throughput.METHODS)
    for pipeline, mode in configs:
        for name in throughput.METHODS:
            assert f"(a) {name}, {mode} step, {pipeline} augmentation, full training step" in full
    for row in rows[1:]:
        assert "(a)/(b) " in row.note and "(a)/(b')" not in row.note and row.seconds > 0
        assert "Python calls/step" in row.note and "host " in row.note
    assert sum("vs CL" in row.note for row in rows) == 6  # NCL and BayesNCL, 3 configs


def test_benchmark_selections_read_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """NCL_BENCH_METHODS / _MODES / _PIPELINES / _CPU_PIPELINE_MODES / _BARE: any case,
    duplicates dropped, an unknown name refused with the valid ones."""
    from benchmarks import throughput
    from ncl_lightning.foundation.errors import ConfigError

    monkeypatch.setenv("NCL_BENCH_METHODS", "ncl, bayesncl,NCL")
    assert throughput.methods() == ("NCL", "BayesNCL")
    monkeypatch.delenv("NCL_BENCH_METHODS")
    assert throughput.methods() == tuple(throughput.METHODS)
    assert throughput.methods(("NCL",)) == ("NCL",)
    monkeypatch.setenv("NCL_BENCH_MODES", "eager,compiled,graphs")
    monkeypatch.setenv("NCL_BENCH_CPU_PIPELINE_MODES", "graphs,eager")
    assert throughput.pipeline_modes("device") == throughput.MODES
    assert throughput.pipeline_modes("cpu") == ("graphs", "eager")
    monkeypatch.setenv("NCL_BENCH_PIPELINES", "device")
    assert throughput.pipelines() == ("device",)
    monkeypatch.setenv("NCL_BENCH_BARE", "capturedd")
    with pytest.raises(ConfigError, match="'capturedd' is not one of eager, captured"):
        throughput.bare_kinds()


@pytest.mark.slow
def test_captured_bare_step_compiles_and_is_timed(monkeypatch: pytest.MonkeyPatch) -> None:
    """(b'): the tiny network's bare step as torch.compile graphs (default mode on a CPU):
    dynamo compiles graphs for the loss and the LARS update, and the step is timed."""
    from benchmarks.clock import dynamo_counts
    from benchmarks.step_parts import TinyBareStep, settings_for

    pytest.importorskip("torch._inductor")
    monkeypatch.setattr("benchmarks.throughput.BATCH_SIZE", 4)
    monkeypatch.setattr("benchmarks.throughput.CAPTURED_WARMUP", 2)
    before = dynamo_counts()
    bare = TinyBareStep(settings_for("tiny"), captured=True)
    assert bare.compile_mode == "default"
    compiled = dynamo_counts()
    assert compiled["graphs"] - before["graphs"] >= 2  # the loss and the update, at least
    weight = next(bare.model.backbone.parameters()).detach().clone()
    bare.measure(2)
    assert dynamo_counts()["graphs"] == compiled["graphs"]  # no recompilation when timed
    assert not torch.equal(weight, next(bare.model.backbone.parameters()))  # LARS stepped
    assert len(bare.samples) == 1 and bare.samples[0] > 0 and bare.host_samples[0] > 0


def test_throughput_benchmark_names_a_missing_data_folder(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from benchmarks import throughput

    monkeypatch.setenv("NCL_BENCH_DATA", str(tmp_path / "absent"))
    with pytest.raises(FileNotFoundError, match="set NCL_BENCH_DATA"):
        throughput.data_root()


@pytest.mark.slow
def test_switches_benchmark_times_every_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    """One row per precision x channels_last setting (compile left out to stay fast)."""
    from benchmarks import speed_settings, throughput
    from ncl_lightning.nn import SmallCNN

    def small_model(name: str, settings: dict, num_classes: int = 10):
        return throughput.METHODS[name](
            SmallCNN(3, 4, 16),
            proj_hidden_dim=16,
            proj_output_dim=8,
            channels_last=settings["channels_last"],
            torch_compile=settings["torch_compile"],
        )

    monkeypatch.setattr(throughput, "make_model", small_model)
    monkeypatch.setattr(throughput, "BATCH_SIZE", 4)
    monkeypatch.setattr(speed_settings, "COMPILE", (False,))
    rows = speed_settings.run(repeats=1)
    assert [row.what for row in rows] == [
        f"precision={p}, channels_last={c}, torch_compile=False"
        for p in speed_settings.PRECISIONS
        for c in speed_settings.CHANNELS_LAST
    ]
    assert all(row.seconds > 0 and "img/s" in row.note for row in rows)


def test_the_package_never_imports_the_benchmarks() -> None:
    """``benchmarks/`` is a folder of the checkout, not in the wheel: nothing installed may
    import it."""
    from tests.conftest import ROOT

    for path in (ROOT / "ncl_lightning").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        assert "import benchmarks" not in text and "from benchmarks" not in text, path
