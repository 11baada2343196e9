"""The step benchmark's tools: OpCounter (a torch.profiler trace) against counts made by
hand, StepParts through a real ``Trainer.fit`` (every part reported, the parts adding up
to the step), and ``python -m benchmarks step`` end to end on small batches."""

from __future__ import annotations

import math
import time
from collections import Counter
from pathlib import Path

import lightning as L
import pytest
import torch

from benchmarks.counting import OpCounter, scope
from benchmarks.parts import PARTS, StepParts, instrument, part_of
from ncl_lightning.foundation.errors import UsageError
from tests.conftest import subset_copy


@pytest.fixture(scope="module")
def cifar_small(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first 8 training (2 validation) images of every class of the real CIFAR-10
    subset: 10 batches of 8, enough for every step of the small runs here; decoded in a
    fraction of the whole subset's time (each fit decodes its data again)."""
    return subset_copy(tmp_path_factory.mktemp("cifar_small"), 8, 2)


def test_op_counter_counts_each_sync_prone_call_once() -> None:
    """By hand: sum + item, nonzero, a boolean-mask index (one ``index`` that runs its own
    ``nonzero``), ``tolist`` and ``.cpu()`` (Python calls, no operator on a CPU), and an
    index assignment of a number (a 0-d CPU value: a pageable copy on a GPU)."""
    x = torch.arange(6.0)
    mask = x > 2
    m = torch.zeros(3, dtype=torch.bool)
    rows = torch.tensor([0, 2])
    with OpCounter() as count:
        x.sum().item()
        x.nonzero()
        x[mask]
        x.tolist()
        x.cpu()
        m[rows] = True
    for name in ("aten::sum", "aten::item", "aten::nonzero", "aten::index", "aten::index_put_"):
        assert count.by_name[name] == 1, name
    assert "aten::_local_scalar_dense" not in count.by_name  # item's own: not counted apart
    assert count.syncs == {
        "item": 1, "nonzero": 1, "bool_mask_index": 1, "tolist": 1, "cpu": 1,
        "scalar_index_put": 1,
    }  # fmt: skip
    assert count.total_syncs == 6
    assert m.tolist() == [True, False, True]


def test_op_counter_counts_a_foreach_op_once_and_views_apart() -> None:
    tensors = [torch.zeros(3) for _ in range(10)]
    x = torch.arange(6.0)
    with OpCounter() as count:
        torch._foreach_add_(tensors, 1.0)
        x.view(2, 3).t() + 1  # view, t (views, no kernel) and add
    assert count.by_name == Counter(
        {"aten::_foreach_add_": 1, "aten::view": 1, "aten::t": 1, "aten::add": 1}
    )
    assert count.ops == 4 and count.views == 2 and count.launches == 2
    assert count.syncs == {}
    assert all(torch.equal(t, torch.ones(3)) for t in tensors)


def test_op_counter_splits_counts_by_scope() -> None:
    x = torch.arange(4.0)
    with OpCounter() as count:
        with scope("a"):
            y = x * 2 + 1
        with scope("b"):
            y.max().item()
    assert (count.parts["a"].ops, count.parts["b"].ops) == (2, 2)
    assert count.parts["a"].syncs == {} and count.parts["b"].syncs == {"item": 1}
    assert sum(t.ops for t in count.parts.values()) == count.ops


def test_lightning_actions_map_to_parts() -> None:
    assert part_of("[_TrainingEpochLoop].train_dataloader_next") == "data"
    assert part_of("[Strategy]SingleDeviceStrategy.batch_to_device") == "data"
    assert part_of("[LightningDataModule]ImageFolderDataModule.on_after_batch_transfer") == "views"
    assert part_of("[Strategy]SingleDeviceStrategy.backward") == "backward"
    assert part_of("[LightningModule]NCL.optimizer_step") == "optimizer"
    assert part_of("[Callback]NonFiniteGuard.on_train_batch_start") == "guard"
    assert part_of("[Callback]FeatureStatistics.on_train_batch_end") == "callbacks"
    assert part_of("run_training_batch") is None


class _FakeEvent:
    """A CUDA event stand-in on the host clock (for the device-timing bookkeeping)."""

    def __init__(self, enable_timing: bool = False) -> None:
        self.at = math.nan

    def record(self, stream: object = None) -> None:
        self.at = time.perf_counter()

    def elapsed_time(self, end: _FakeEvent) -> float:
        return 1e3 * (end.at - self.at)


@pytest.mark.slow
def test_step_parts_reports_every_part_of_a_real_fit(
    cifar_small, monkeypatch: pytest.MonkeyPatch
) -> None:
    """BayesNCL on a tiny network, device views of the real CIFAR images, batch 8: 1
    warm-up, 2 timed and 2 counted steps, then the callback stops the run. Device timing
    runs on stand-in events here (no GPU needed)."""
    from benchmarks.step_parts import TinyNet, settings_for
    from benchmarks.throughput import build_method
    from ncl_lightning.data import ImageFolderDataModule
    from ncl_lightning.methods import BayesNCL

    monkeypatch.setattr(torch.cuda, "Event", _FakeEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *args, **kwargs: None)
    data = ImageFolderDataModule(
        str(cifar_small), image_size=32, batch_size=8, cache="memory", augment_on="device"
    )
    parts = StepParts(warmup=1, timed=2, counted=2, device_timing=True)
    model = build_method(
        "BayesNCL", TinyNet(), settings_for("tiny"), data.num_classes, 8, "eager",
        instrument(BayesNCL, parts), proj_hidden_dim=32, proj_output_dim=16,
    )  # fmt: skip
    assert isinstance(model, BayesNCL) and type(model).__name__ == "BayesNCL"
    trainer = L.Trainer(
        max_steps=parts.max_steps,
        limit_val_batches=0,
        logger=False,
        callbacks=[parts.stopper],
        profiler=parts,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        log_every_n_steps=1,
    )
    trainer.fit(model, data)

    assert trainer.global_step < parts.max_steps  # stopped by the callback
    assert parts.done and len(parts.step_seconds) == 2 and parts.counted_steps == 2
    report = parts.per_step()
    assert list(report) == list(PARTS)
    for part in ("data", "views", "forward", "loss", "guard", "backward", "optimizer", "loop"):
        assert report[part]["host_ms"] > 0, part
        assert report[part]["ops"] > 0 or part in ("data", "loop"), part
    for cell in report.values():
        assert cell["device_ms"] is not None and cell["device_ms"] >= 0
    # The parts add up to the step: operators, syncs, host time, device time.
    assert sum(t.ops for t in parts.tallies.values()) == parts.total.ops > 0
    assert sum(t.views for t in parts.tallies.values()) == parts.total.views
    syncs = sum((t.syncs for t in parts.tallies.values()), Counter())
    assert syncs == parts.total.syncs
    assert sum(parts.host.values()) == pytest.approx(sum(parts.step_seconds), rel=1e-9)
    assert sum(parts.device.values()) == pytest.approx(1e3 * sum(parts.step_seconds), rel=0.05)


@pytest.mark.slow
def test_step_benchmark_prints_a_table_per_method_and_pipeline(
    cifar_small, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture
) -> None:
    """``python -m benchmarks step`` in the framework-overhead mode, small, with
    its 'Python calls / step' column."""
    from benchmarks import step_parts
    from benchmarks.__main__ import main
    from benchmarks.throughput import METHODS, PIPELINES

    monkeypatch.setenv("NCL_BENCH_DATA", str(cifar_small))
    monkeypatch.setenv("NCL_BENCH_STEP_NETWORK", "tiny")
    monkeypatch.setenv("NCL_BENCH_MODES", "eager")
    monkeypatch.setattr(step_parts, "BATCH_SIZE", 8)
    monkeypatch.setattr(step_parts, "WARMUP", 1)
    monkeypatch.setattr(step_parts, "TIMED", 2)
    monkeypatch.setattr(step_parts, "COUNTED", 2)
    monkeypatch.setattr(step_parts, "CALLS", 2)
    threads = torch.get_num_threads()
    assert main(["step", "--repeats", "1"]) == 0
    assert torch.get_num_threads() == threads  # restored after the one-thread runs
    out = capfd.readouterr().out
    assert "## step: parts of one training step (tiny network, batch 8 x 2 views" in out
    assert "| Python calls / step | C calls / step |" in out
    for pipeline in PIPELINES:
        for name in METHODS:
            assert f"### {name}, eager step, {pipeline} augmentation" in out
            assert f"| {name}, eager step, {pipeline} augmentation: training step |" in out
            assert f"| {name} | eager | {pipeline} |" in out  # the table of all configurations
    for part in PARTS:
        assert out.count(f"| {part} |") == len(PIPELINES) * len(METHODS)
    assert out.count("Python calls per step: ") == len(PIPELINES) * len(METHODS)
    assert "x NCL's step" in out and "## step\n" in out


@pytest.mark.slow
def test_step_benchmark_runs_a_captured_mode_without_counting_operators(
    cifar_small, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture
) -> None:
    """``step_mode: compiled``: the part wrappers stay out of the graphs (torch.compile
    traces through them: ``fullgraph=True`` fails on a graph break), no operator is
    counted (the graphs run kernels, not ATen operators), and the Python calls per step
    are. The graphs are traced by dynamo and AOTAutograd as always, but built by the
    ``aot_eager`` backend, not inductor: its C++ code generation and compilation (most of
    a minute on a small CPU) are not what this checks."""
    from benchmarks import step_parts
    from benchmarks.__main__ import main

    compile_ = torch.compile

    def aot_eager(model=None, **options):
        options.pop("mode", None)
        return compile_(model, **options, backend="aot_eager")

    monkeypatch.setattr(torch, "compile", aot_eager)

    monkeypatch.setenv("NCL_BENCH_DATA", str(cifar_small))
    monkeypatch.setenv("NCL_BENCH_STEP_NETWORK", "tiny")
    monkeypatch.setenv("NCL_BENCH_METHODS", "NCL")
    monkeypatch.setenv("NCL_BENCH_PIPELINES", "device")
    monkeypatch.setenv("NCL_BENCH_MODES", "compiled")
    monkeypatch.setattr(step_parts, "BATCH_SIZE", 8)
    monkeypatch.setattr(step_parts, "WARMUP", 1)
    monkeypatch.setattr(step_parts, "TIMED", 2)
    monkeypatch.setattr(step_parts, "CALLS", 2)
    assert main(["step", "--repeats", "1"]) == 0
    out = capfd.readouterr().out
    assert "| NCL | compiled | device |" in out and "| - | - | - | - |" in out
    assert "operators not counted (captured)" in out
    assert "Python calls per step: " in out and "FAILED" not in out


# -- Python calls per step and the event timer (issue 43) ------------------------------


def _leaf(x: int) -> int:
    return abs(x)  # one C call


def _branch(x: int) -> int:
    return _leaf(x) + _leaf(-x)


def test_python_call_counter_counts_calls_and_c_calls_exactly() -> None:
    """By hand: ``_branch`` calls ``_leaf`` twice, each calls ``abs``; a generator counts
    once per resumption; the block's own entry and exit are not counted."""
    from benchmarks.counting import PythonCallCounter

    with PythonCallCounter() as empty:
        pass
    assert (empty.calls, empty.c_calls, dict(empty.functions)) == (0, 0, {})

    with PythonCallCounter() as count:
        _branch(3)
    assert (count.calls, count.c_calls) == (3, 2)
    assert [n.split(" ")[-1] for n, _ in count.top()] == ["_leaf", "_branch"]
    assert [c for _, c in count.top()] == [2, 1]

    def numbers():
        yield 1
        yield 2

    with PythonCallCounter() as resumed:
        for _ in numbers():
            pass
    assert resumed.calls == 3  # started, resumed after 1, resumed after 2 (and stops)


def test_python_call_counter_restores_the_previous_profile_hook() -> None:
    import sys

    from benchmarks.counting import PythonCallCounter

    seen: list[str] = []

    def outer(frame, event, arg):
        seen.append(event)

    sys.setprofile(outer)
    try:
        with PythonCallCounter() as count:
            assert count.active
            _leaf(1)
        assert sys.getprofile() is outer and not count.active
    finally:
        sys.setprofile(None)
    assert count.calls == 1


class _ScriptedEvent:
    """A CUDA event stand-in whose record() reads a scripted device clock (ms)."""

    clock: list[float] = []
    synchronized = 0

    def __init__(self, enable_timing: bool = False) -> None:
        self.at = math.nan

    def record(self, stream: object = None) -> None:
        self.at = _ScriptedEvent.clock.pop(0)

    def synchronize(self) -> None:
        _ScriptedEvent.synchronized += 1

    def elapsed_time(self, end: _ScriptedEvent) -> float:
        return end.at - self.at


@pytest.fixture
def scripted_events(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """``torch.cuda.Event`` scripted, ``torch.cuda.synchronize`` recorded in the log."""
    log: list[str] = []
    _ScriptedEvent.clock, _ScriptedEvent.synchronized = [], 0
    monkeypatch.setattr(torch.cuda, "Event", _ScriptedEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: log.append("synchronize"))
    return log


def test_event_timer_reads_the_span_of_the_window_per_step(scripted_events) -> None:
    """Device seconds per step = (last event - first event) / steps, from events only;
    marking waits for nothing, reading waits once, on the last event."""
    from benchmarks.clock import EventTimer

    _ScriptedEvent.clock = [10.0, 30.0, 35.0, 70.0]  # ms: steps of 20, 5 and 35 ms
    timer = EventTimer(device_events=True)
    for _ in range(4):
        timer.mark()
    assert scripted_events == [] and _ScriptedEvent.synchronized == 0
    assert timer.device_seconds() == pytest.approx(0.020)  # 60 ms / 3 steps
    assert _ScriptedEvent.synchronized == 1
    assert timer.device_seconds(1, 2) == pytest.approx(0.005)
    assert timer.seconds() == timer.device_seconds()
    assert timer.pairs()[0][1] == pytest.approx(0.020)  # marks (0, 1), (2, 3)
    assert timer.pairs()[1][1] == pytest.approx(0.035)
    assert timer.host_seconds() >= 0
    with pytest.raises(UsageError, match="two marks"):
        timer.device_seconds(2, 1)

    host_only = EventTimer(device_events=False)
    host_only.mark()
    host_only.mark()
    assert host_only.device_seconds() is None and host_only.events == []
    assert host_only.seconds() == host_only.host_seconds() >= 0


def test_step_clock_windows_in_order(scripted_events) -> None:
    """Driven hook by hook as a Trainer calls them: warm-up, the steady window (marks, no
    wait), the Python-call window (from one batch start to the batch start ``calls``
    steps later), then isolated steps, each after one synchronize and nothing else."""
    import sys

    from benchmarks.clock import StepClock

    clock = StepClock(warmup=2, timed=3, isolated=2, calls=2, device_events=True)
    assert clock.max_steps == 2 + 3 + (2 + 1) + 2
    _ScriptedEvent.clock = [float(t) for t in range(0, 1000, 10)]
    log = scripted_events
    clock.on_train_start()
    for step in range(clock.max_steps):
        clock.on_train_batch_start()
        log.append(f"step {step} profiled" if sys.getprofile() is not None else f"step {step}")
        _leaf(step)
        clock.on_train_batch_end()
    clock.on_train_end()
    assert sys.getprofile() is None
    assert len(clock.steady) == 4  # the ends of steps 1 (last warm-up) to 4
    assert log == [
        "step 0", "step 1", "step 2", "step 3", "step 4",  # warm-up and timed: no wait
        "step 5 profiled", "step 6 profiled",  # the two counted steps
        "step 7",  # its start closes the count
        "synchronize", "step 8", "synchronize", "step 9",  # isolated
    ]  # fmt: skip
    assert clock.step_seconds() == pytest.approx(0.010)  # 10 ms between scripted events
    assert clock.isolated_seconds()[1] == pytest.approx(0.010)
    calls, c_calls = clock.calls_per_step()
    assert calls >= 1 and c_calls >= 1  # _leaf and abs, each step, at least
    assert any(name.endswith(" _leaf") for name, _ in clock.top_functions())
    assert clock.compiled.get("graphs", 0) == 0  # nothing compiled: eager


def test_step_clock_on_a_cpu_has_no_isolated_steps_and_never_waits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from benchmarks.clock import StepClock

    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: pytest.fail("waited"))
    clock = StepClock(warmup=1, timed=2, device_events=False)
    assert clock.isolated == 0 and clock.max_steps == 3
    for _ in range(clock.max_steps):
        clock.on_train_batch_start()
        clock.on_train_batch_end()
    clock.on_train_end()
    assert clock.isolated_seconds() is None and clock.calls_per_step() is None
    assert clock.steady.events == [] and clock.step_seconds() >= 0


@pytest.mark.slow
def test_step_clock_counts_python_calls_of_a_real_fit(cifar_small) -> None:
    """Through ``Trainer.fit`` (tiny network, batch 8, device views): the counted steps
    see Lightning's loop and the module's step, and the profile hook is gone after."""
    import sys

    from benchmarks.clock import StepClock
    from benchmarks.step_parts import make_tiny, settings_for
    from ncl_lightning.data import ImageFolderDataModule

    data = ImageFolderDataModule(
        str(cifar_small), image_size=32, batch_size=8, cache="memory", augment_on="device"
    )
    model = make_tiny("NCL", settings_for("tiny"), data.num_classes)
    clock = StepClock(warmup=2, timed=2, calls=2)
    trainer = L.Trainer(
        max_steps=clock.max_steps, limit_val_batches=0, logger=False, callbacks=[clock],
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
    )  # fmt: skip
    trainer.fit(model, data)
    assert trainer.global_step == clock.max_steps and sys.getprofile() is None
    calls, c_calls = clock.calls_per_step()
    assert calls > 100 and c_calls > 100
    names = " ".join(name for name, _ in clock.top_functions(50))
    assert "lightning" in names or "torch" in names
