"""Exact resume of the generated data (dSprites, sparse coding), as for the image data.

A run is interrupted in the middle of its second epoch, right after a checkpoint written
at a batch (as a pre-empted job does), and resumed with ``ckpt_path``: it must go on with
the next batch of the same epoch and end with the weights of a run never interrupted.
The reference is the uninterrupted run itself, batch by batch (every view tensor).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.pytorch import Callback

from ncl_lightning.checkpoints.load import read_checkpoint
from ncl_lightning.data import DSpritesDataModule, SparseCodingDataModule
from ncl_lightning.methods import CL
from ncl_lightning.nn import SparseCodingEncoder

STOP = (1, 1)  # (epoch, batch): the checkpoint holds batches 0 and 1 of epoch 1


class _Interrupted(Exception):
    """Stands for the kill that ends the interrupted run."""


class RecordBatches(Callback):
    """Keeps ``(epoch, batch index, views)`` of every training batch; with ``save``, writes a
    checkpoint after batch ``STOP`` and interrupts the run there."""

    def __init__(self, save: Path | None = None) -> None:
        self.save = save
        self.batches: list[tuple[int, int, list[torch.Tensor]]] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        views = [v.detach().clone() for v in batch[0]]
        self.batches.append((trainer.current_epoch, batch_idx, views))
        if self.save is not None and (trainer.current_epoch, batch_idx) == STOP:
            trainer.save_checkpoint(self.save)
            raise _Interrupted


def _fit(
    model_fn: Callable[[], L.LightningModule],
    data: L.LightningDataModule,
    root: Path,
    save: Path | None = None,
    ckpt_path: Path | None = None,
) -> tuple[L.LightningModule, RecordBatches]:
    L.seed_everything(3)
    model, record = model_fn(), RecordBatches(save)
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=2,
        deterministic=True,
        default_root_dir=root,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        callbacks=[record],
    )
    try:
        trainer.fit(model, data, ckpt_path=ckpt_path)
    except _Interrupted:
        assert save is not None
    return model, record


def _sgd(params):
    return torch.optim.SGD(params, lr=0.05, momentum=0.9)


def _cl(backbone: torch.nn.Module) -> CL:
    return CL(
        backbone, proj_hidden_dim=16, proj_output_dim=8, optimizer=_sgd, scale_lr=False,
        warmup_epochs=1,
    )  # fmt: skip


class _Linear(torch.nn.Module):
    """A linear backbone for 64x64 sprites (the data, not the encoder, is under test)."""

    out_dim = 8

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64 * 64, self.out_dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def _sprites(workers: int) -> DSpritesDataModule:
    return DSpritesDataModule(
        train_size=32, val_size=8, test_size=8, batch_size=8, num_workers=workers, seed=4,
        factor_jitter=1,
    )  # fmt: skip


def _sparse(workers: int) -> SparseCodingDataModule:
    assert workers == 0  # the sparse-coding data load in the main process
    return SparseCodingDataModule(n=64, p=12, d=4, batch_size=16, val_n=16, seed=4)


CASES = {
    "dsprites": (_sprites, lambda: _cl(_Linear())),
    "sparse_coding": (_sparse, lambda: _cl(SparseCodingEncoder(12, 8))),
}


@pytest.mark.parametrize(
    ("name", "workers"), [("dsprites", 0), ("dsprites", 2), ("sparse_coding", 0)]
)
def test_mid_epoch_checkpoint_resumes_with_the_next_batch(
    tmp_path: Path, name: str, workers: int
) -> None:
    data_fn, model_fn = CASES[name]
    want_model, want = _fit(model_fn, data_fn(workers), tmp_path / "reference")
    assert len(want.batches) == 8  # 2 epochs of 4 batches

    mid = tmp_path / "mid.ckpt"
    _, stopped = _fit(model_fn, data_fn(workers), tmp_path / "run", save=mid)
    state = read_checkpoint(mid)[type(data_fn(workers)).__name__]
    assert (state["epoch"], state["batches"]) == (1, 2)  # batches 0 and 1 of epoch 1 done
    got_model, resumed = _fit(model_fn, data_fn(workers), tmp_path / "run", ckpt_path=mid)

    # The interrupted run, then the resumed one, saw exactly the reference's batches.
    seen = stopped.batches + resumed.batches
    assert [(e, i) for e, i, _ in resumed.batches] == [(1, 2), (1, 3)]
    assert len(seen) == len(want.batches)
    for (e, i, views), (_, _, ref) in zip(seen, want.batches, strict=True):
        assert all(torch.equal(a, b) for a, b in zip(views, ref, strict=True)), (e, i)
    # Epochs and views differ: the equality above is not that of a constant stream.
    assert not torch.equal(want.batches[0][2][0], want.batches[4][2][0])
    assert not torch.equal(want.batches[0][2][0], want.batches[0][2][1])
    for key, value in want_model.state_dict().items():
        assert torch.equal(value, got_model.state_dict()[key]), key
