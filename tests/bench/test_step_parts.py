"""The step benchmark's tools: OpCounter against counts made by hand, StepParts through a
real ``Trainer.fit`` (every part reported, the parts adding up to the step), and
``python -m ncl_lightning.bench step`` end to end on small batches."""

from __future__ import annotations

import math
import time
from collections import Counter

import lightning as L
import pytest
import torch

from ncl_lightning.bench.counting import OpCounter, sync_kind
from ncl_lightning.bench.parts import PARTS, StepParts


def test_op_counter_counts_each_sync_prone_call_once() -> None:
    """By hand: sum + item, nonzero, a boolean-mask index (one ``index`` whose kernel
    finds the mask's elements itself), ``tolist`` (no operator) and ``.cpu()``."""
    x = torch.arange(6.0)
    mask = x > 2
    with OpCounter() as count:
        x.sum().item()
        x.nonzero()
        x[mask]
        x.tolist()
        x.cpu()
    assert count.by_name == Counter(
        {
            "aten::sum": 1,
            "aten::_local_scalar_dense": 1,
            "aten::nonzero": 1,
            "aten::index.Tensor": 1,
        }
    )
    assert count.ops == 4
    assert count.syncs == {"item": 1, "nonzero": 1, "bool_mask_index": 1, "tolist": 1, "cpu": 1}
    assert count.total_syncs == 5
    assert torch.Tensor.tolist(x) == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]  # unwrapped again


def test_op_counter_counts_a_foreach_op_once_and_views_apart() -> None:
    tensors = [torch.zeros(3) for _ in range(10)]
    x = torch.arange(6.0)
    with OpCounter() as count:
        torch._foreach_add_(tensors, 1.0)
        x.view(2, 3).t() + 1  # view, t (views, no kernel) and add
    assert count.by_name["aten::_foreach_add_.Scalar"] == 1
    assert count.ops == 4 and count.views == 2 and count.launches == 2
    assert count.syncs == {}
    assert all(torch.equal(t, torch.ones(3)) for t in tensors)


def test_op_counter_splits_counts_by_part() -> None:
    x = torch.arange(4.0)
    with OpCounter() as count:
        count.part = "a"
        y = x * 2 + 1
        count.part = "b"
        y.max().item()
    assert (count.parts["a"].ops, count.parts["b"].ops) == (2, 2)
    assert count.parts["a"].syncs == {} and count.parts["b"].syncs == {"item": 1}
    assert sum(t.ops for t in count.parts.values()) == count.ops


def test_copies_between_host_tensors_are_no_sync() -> None:
    t = torch.ones(2)
    assert sync_kind("aten::_to_copy", (t,), {"device": torch.device("cpu")}) is None
    assert sync_kind("aten::copy_", (torch.empty(2), t), {}) is None
    assert sync_kind("aten::repeat_interleave.self_int", (t, 2), {}) is None
    assert sync_kind("aten::repeat_interleave.Tensor", (t,), {}) == "repeat_interleave"


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
    cifar_subset, monkeypatch: pytest.MonkeyPatch
) -> None:
    """BayesNCL on a tiny network, device views of the real CIFAR images, batch 8: 1
    warm-up, 2 timed and 2 counted steps, then the callback stops the run. Device timing
    runs on stand-in events here (no GPU needed)."""
    from ncl_lightning.bench.step_parts import make_tiny, settings_for
    from ncl_lightning.data import ImageFolderDataModule

    monkeypatch.setattr(torch.cuda, "Event", _FakeEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *args, **kwargs: None)
    data = ImageFolderDataModule(
        str(cifar_subset), image_size=32, batch_size=8, cache="memory", augment_on="device"
    )
    model = make_tiny("BayesNCL", settings_for("tiny"), data.num_classes)
    parts = StepParts(warmup=1, timed=2, counted=2, device_timing=True)
    trainer = L.Trainer(
        max_steps=parts.max_steps,
        limit_val_batches=0,
        logger=False,
        callbacks=[parts],
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        log_every_n_steps=1,
    )
    trainer.fit(model, data)

    assert trainer.global_step == 5  # stopped by the callback, not by max_steps
    assert len(parts.step_seconds) == 2 and parts.counted_steps == 2
    report = parts.per_step()
    assert list(report) == list(PARTS)
    for part, cell in report.items():
        assert cell["host_ms"] > 0, part
        assert cell["device_ms"] is not None and cell["device_ms"] >= 0, part
    for part in ("views", "forward", "loss", "probe + kNN", "guard", "backward", "optimizer"):
        assert report[part]["ops"] > 0, part
    # The parts add up to the step: operators, syncs, host time, device time.
    assert sum(t.ops for t in parts.tallies.values()) == parts.total.ops > 0
    assert sum(t.views for t in parts.tallies.values()) == parts.total.views
    syncs = sum((t.syncs for t in parts.tallies.values()), Counter())
    assert syncs == parts.total.syncs
    assert sum(parts.host.values()) == pytest.approx(sum(parts.step_seconds), rel=1e-9)
    assert sum(parts.device.values()) == pytest.approx(1e3 * sum(parts.step_seconds), rel=0.05)
    # Every wrapper is gone after the run.
    for owner, name in (
        (model, "training_step"),
        (model, "encode"),
        (model, "log"),
        (model.online, "add_to_bank"),
        (trainer.strategy, "batch_to_device"),
        (trainer.strategy, "backward"),
        (data, "on_after_batch_transfer"),
        (trainer._logger_connector, "update_train_step_metrics"),
    ):
        assert name not in vars(owner), name
    assert parts._patches == []  # the optimiser's and the guard's too


@pytest.mark.slow
def test_step_benchmark_prints_a_table_per_method_and_pipeline(
    cifar_subset, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture
) -> None:
    """``python -m ncl_lightning.bench step`` in the framework-overhead mode, small."""
    from ncl_lightning.bench import step_parts
    from ncl_lightning.bench.__main__ import main
    from ncl_lightning.bench.throughput import METHODS, PIPELINES

    monkeypatch.setenv("NCL_BENCH_DATA", str(cifar_subset))
    monkeypatch.setenv("NCL_BENCH_STEP_NETWORK", "tiny")
    monkeypatch.setattr(step_parts, "BATCH_SIZE", 8)
    monkeypatch.setattr(step_parts, "WARMUP", 1)
    monkeypatch.setattr(step_parts, "TIMED", 2)
    monkeypatch.setattr(step_parts, "COUNTED", 2)
    threads = torch.get_num_threads()
    assert main(["step", "--repeats", "1"]) == 0
    assert torch.get_num_threads() == threads  # restored after the one-thread runs
    out = capfd.readouterr().out
    assert "## step: parts of one training step (tiny network, batch 8 x 2 views" in out
    for pipeline in PIPELINES:
        for name in METHODS:
            assert f"### {name}, {pipeline} augmentation" in out
            assert f"| {name}, {pipeline} augmentation: training step |" in out
            assert f"| {name} | {pipeline} |" in out  # the table of all configurations
    for part in PARTS:
        assert out.count(f"| {part} |") == len(PIPELINES) * len(METHODS)
    assert "x NCL's step" in out and "## step\n" in out
