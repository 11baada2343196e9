"""Learning-rate scaling reads the batch the training loader actually loads, and a fit
prints the batch summary once (with the accumulation note only when accumulating)."""

from __future__ import annotations

import logging
from pathlib import Path

import lightning as L
import pytest
import torch

from ncl_lightning.data import DigitsDataModule
from ncl_lightning.methods import NCL
from ncl_lightning.nn import SmallCNN

BASE_LR, PROBE_LR = 0.4, 0.1
# DigitsDataModule(num_workers=0): its loader clause (pinned only where CUDA is available)
PINNED = ", pinned" if torch.cuda.is_available() else ""
LOADER = f"; loader: main process (num_workers: 0){PINNED}"


def _ncl(batch_size: int | None) -> NCL:
    torch.manual_seed(0)
    return NCL(
        SmallCNN(1, 8, 16), proj_hidden_dim=32, proj_output_dim=16, num_classes=10,
        batch_size=batch_size, optimizer=lambda p: torch.optim.SGD(p, lr=BASE_LR),
        probe_lr=PROBE_LR, scale_lr=True,
    )  # fmt: skip


class _Records(logging.Handler):
    """Keeps the messages Lightning's logger emits (however it propagates)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _fit(
    root: Path, model: NCL, data: DigitsDataModule, accumulate: int = 1
) -> tuple[list[float], list[str]]:
    """Fit 2 steps; return the peak rate of each group and the batch lines logged."""
    trainer = L.Trainer(
        accelerator="cpu", max_epochs=1, limit_train_batches=2, limit_val_batches=0,
        accumulate_grad_batches=accumulate, logger=False, enable_progress_bar=False,
        enable_model_summary=False, enable_checkpointing=False, default_root_dir=root,
    )  # fmt: skip
    lines = fit_batch_lines(trainer, model, data)
    return [group["initial_lr"] for group in trainer.optimizers[0].param_groups], lines


def fit_batch_lines(trainer: L.Trainer, model: L.LightningModule, data: object) -> list[str]:
    """``trainer.fit(model, data)``; the ``Batch:`` lines Lightning's logger printed."""
    logger, records = logging.getLogger("lightning.pytorch"), _Records()
    level = logger.level  # another test in this process may have quietened Lightning
    logger.addHandler(records)
    logger.setLevel(logging.INFO)
    try:
        trainer.fit(model, data)
    finally:
        logger.removeHandler(records)
        logger.setLevel(level)
    return [m for m in records.messages if m.startswith("Batch:")]


@pytest.mark.parametrize("module_batch", [None, 999])
def test_the_loaded_batch_scales_the_rate(module_batch: int | None, tmp_path: Path) -> None:
    data = DigitsDataModule(batch_size=32, num_workers=0)
    peaks, lines = _fit(tmp_path, _ncl(module_batch), data)
    expected = {BASE_LR * 32 / 256, PROBE_LR * 32 / 256}
    assert {round(p, 12) for p in peaks} == {round(e, 12) for e in expected}
    assert len(lines) == 1, lines
    assert lines[0] == (
        "Batch: 1 process (1 node x 1 device) x 32 per device = global batch 32 "
        "(batch_scope: device); learning rates 0.4, 0.1 -> 0.05, 0.0125 (x 32/256, lr scaled "
        "by global batch / 256)" + LOADER
    )


def test_accumulation_scales_by_samples_per_update_and_says_so(tmp_path: Path) -> None:
    data = DigitsDataModule(batch_size=64, batch_scope="global", num_workers=0)
    peaks, lines = _fit(tmp_path, _ncl(64), data, accumulate=2)
    assert max(peaks) == pytest.approx(BASE_LR * 64 * 2 / 256)
    assert len(lines) == 1, lines
    first, note = lines[0].split("\n")
    assert "x 64 per device = global batch 64 (batch_scope: global)" in first
    assert first.endswith("(x 128/256, lr scaled by samples per update / 256)" + LOADER)
    assert note.startswith("gradient accumulation 2: 128 samples per update")
    assert "accumulation does not add negatives" in note
