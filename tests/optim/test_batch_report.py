"""The batch summary a run prints: pure formatting of the layout and the peak rates."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.optim.batch_report import BatchLayout, batch_layout, describe_batch


def test_two_devices_global_scope() -> None:
    layout = BatchLayout(nodes=1, devices=2, per_device=128, batch_scope="global")
    assert describe_batch(layout, [(0.4, 0.4), (0.4, 0.4)], scaled=True) == (
        "Batch: 2 processes (1 node x 2 devices) x 128 per device = global batch 256 "
        "(batch_scope: global); learning rate 0.4 -> 0.4 (x 256/256, lr scaled by global "
        "batch / 256)"
    )


def test_distinct_group_rates_and_singular_words() -> None:
    layout = BatchLayout(nodes=1, devices=1, per_device=512)
    text = describe_batch(layout, [(0.4, 0.8), (0.1, 0.2), (0.4, 0.8)], scaled=True)
    assert text == (
        "Batch: 1 process (1 node x 1 device) x 512 per device = global batch 512; "
        "learning rates 0.4, 0.1 -> 0.8, 0.2 (x 512/256, lr scaled by global batch / 256)"
    )


def test_accumulation_adds_the_negatives_note() -> None:
    layout = BatchLayout(nodes=2, devices=4, per_device=32, accumulation=4, batch_scope="global")
    first, second = describe_batch(layout, [(0.3, 1.2)], scaled=True).split("\n")
    assert first.startswith("Batch: 8 processes (2 nodes x 4 devices) x 32 per device = ")
    assert "global batch 256 (batch_scope: global)" in first
    assert first.endswith("0.3 -> 1.2 (x 1024/256, lr scaled by samples per update / 256)")
    assert second == (
        "gradient accumulation 4: 1024 samples per update, but each contrastive loss sees "
        "only the 256 of one step (accumulation does not add negatives)"
    )


def test_unscaled_and_unknown_batches() -> None:
    layout = BatchLayout(nodes=1, devices=1, per_device=64)
    assert describe_batch(layout, [(0.1, 0.1)], scaled=False).endswith(
        "global batch 64; learning rate 0.1 (not scaled: scale_lr is false)"
    )
    unknown = BatchLayout(nodes=1, devices=2, per_device=None)
    assert describe_batch(unknown, [(0.1, 0.1)], scaled=False) == (
        "Batch: 2 processes (1 node x 2 devices), per-device batch unknown (the training "
        "loader has no batch_size); learning rate 0.1 (not scaled: scale_lr is false)"
    )


def test_the_loader_clause_ends_the_first_line() -> None:
    layout = BatchLayout(nodes=1, devices=1, per_device=256, accumulation=2)
    loader = "15 workers (auto: 16 CPUs / 1 process - 1), pinned, persistent, prefetch 2"
    first, note = describe_batch(layout, [(0.4, 0.8)], scaled=False, loader=loader).split("\n")
    assert first.endswith("(not scaled: scale_lr is false); loader: " + loader)
    assert note.startswith("gradient accumulation 2")
    unknown = BatchLayout(nodes=1, devices=1, per_device=None)
    assert describe_batch(unknown, [(0.1, 0.1)], False, loader="main process").endswith(
        "(not scaled: scale_lr is false); loader: main process"
    )
    assert "loader" not in describe_batch(layout, [(0.4, 0.8)], scaled=True, loader=None)


def _trainer(loader_batch: int | None) -> SimpleNamespace:
    return SimpleNamespace(
        train_dataloader=SimpleNamespace(batch_size=loader_batch), num_nodes=1, num_devices=2,
        accumulate_grad_batches=1, datamodule=None,
    )  # fmt: skip


def test_the_loaded_batch_wins_over_the_module_batch() -> None:
    assert batch_layout(_trainer(64), 256, required=True).per_device == 64
    assert batch_layout(_trainer(None), 256, required=True).per_device == 256
    assert batch_layout(_trainer(None), None, required=False).per_device is None
    with pytest.raises(ConfigError, match="scale_lr needs the per-device batch size"):
        batch_layout(_trainer(None), None, required=True)


def test_rates_a_group_keeps_are_shown_apart() -> None:
    layout = BatchLayout(nodes=1, devices=1, per_device=128)
    text = describe_batch(layout, [(0.3, 0.15), (0.1, 0.05)], scaled=True, unscaled=[0.1, 0.1])
    assert text == (
        "Batch: 1 process (1 node x 1 device) x 128 per device = global batch 128; "
        "learning rates 0.3, 0.1 -> 0.15, 0.05 (x 128/256, lr scaled by global batch / 256); "
        "learning rate 0.1 not scaled (their groups set scale_lr false)"
    )
    one = describe_batch(layout, [(0.3, 0.15)], scaled=True, unscaled=[0.1])
    assert one.endswith("; learning rate 0.1 not scaled (its group sets scale_lr false)")
    two = describe_batch(layout, [], scaled=True, unscaled=[0.1, 0.2], loader="main process")
    assert two == (
        "Batch: 1 process (1 node x 1 device) x 128 per device = global batch 128; "
        "learning rates 0.1, 0.2 not scaled (their groups set scale_lr false); loader: "
        "main process"
    )
    assert describe_batch(layout, [(0.3, 0.15)], scaled=True, unscaled=[]) == describe_batch(
        layout, [(0.3, 0.15)], scaled=True
    )
