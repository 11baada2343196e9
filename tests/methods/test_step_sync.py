"""A steady-state training step of CL, NCL and BayesNCL through the real ``Trainer.fit``
reads nothing of the device on the host: no ``item``, ``nonzero``, ``tolist``, boolean-mask
index or ``.cpu()`` between two batch ends (views, forward, loss, probe, kNN bank, logging,
backward, guard, LARS): each method with the device pipeline (its views made in the step),
and the CPU pipeline (views made in a loader worker) with NCL, as what it changes in the
step (a batch of ready views) is the same for every method.

The budget, documented in docs/performance.md: zero on a step that is not a logging step.
On a logging step (every ``log_every_n_steps``) Lightning turns each logged value into a
Python number for the loggers; the progress bar shows epoch means, read once an epoch. On a
GPU the same window runs under ``torch.cuda.set_sync_debug_mode("error")``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
from lightning.pytorch.loggers import CSVLogger

from benchmarks.counting import OpCounter
from ncl_lightning.data import ImageFolderDataModule
from ncl_lightning.methods import CL, NCL, BayesNCL
from ncl_lightning.nn import SmallCNN
from tests.conftest import subset_copy

METHODS = {"CL": CL, "NCL": NCL, "BayesNCL": BayesNCL}
FIRST, LAST = 3, 5  # the window: from the end of batch FIRST to the end of batch LAST
BATCH = 16


@pytest.fixture(scope="module")
def cifar_small(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first 16 training (2 validation) images of every class of the real CIFAR-10
    subset: 10 batches of 16 an epoch, the window inside the first; decoded in a fraction
    of the whole subset's time (each fit decodes its data again)."""
    return subset_copy(tmp_path_factory.mktemp("cifar_small"), BATCH, 2)


class _Window(L.Callback):
    """Counts sync-prone calls (and, on a GPU, raises on a synchronising call) from the end
    of batch ``FIRST`` to the end of batch ``LAST``: two whole steps, loading included."""

    def __init__(self) -> None:
        self.counter: OpCounter | None = None

    def on_train_batch_end(self, trainer: L.Trainer, module: Any, *args: Any) -> None:
        batch_idx = args[-1]
        if batch_idx == FIRST:
            self.counter = OpCounter()
            self.counter.__enter__()
            if torch.cuda.is_available():
                torch.cuda.set_sync_debug_mode("error")
        elif batch_idx == LAST and self.counter is not None:
            if torch.cuda.is_available():
                torch.cuda.set_sync_debug_mode("default")
            self.counter.__exit__(None, None, None)


def _fit(name: str, pipeline: str, root: Path, data: Path) -> OpCounter:
    L.seed_everything(0, verbose=False)
    model = METHODS[name](
        SmallCNN(in_channels=3, width=8, out_dim=16), proj_hidden_dim=32, proj_output_dim=16,
        num_classes=10, batch_size=BATCH,
    )  # fmt: skip
    datamodule = ImageFolderDataModule(
        root=str(data), batch_size=BATCH, augment_on=pipeline, num_workers=1, cache="memory"
    )
    window = _Window()
    trainer = L.Trainer(
        accelerator="auto", devices=1, max_steps=LAST + 1, limit_val_batches=0,
        logger=CSVLogger(root), log_every_n_steps=50, enable_progress_bar=False,
        enable_model_summary=False, enable_checkpointing=False, default_root_dir=root,
        callbacks=[window],
    )  # fmt: skip
    trainer.fit(model, datamodule)
    assert window.counter is not None and trainer.global_step == LAST + 1
    return window.counter


@pytest.mark.slow
@pytest.mark.parametrize("pipeline", ["device", "cpu"])
@pytest.mark.parametrize("name", sorted(METHODS))
def test_steady_state_step_makes_no_sync_prone_call(
    name: str, pipeline: str, tmp_path: Path, cifar_small: Path
) -> None:
    counter = _fit(name, pipeline, tmp_path, cifar_small)
    assert counter.ops > 0  # the window saw the steps
    assert dict(counter.syncs) == {}, f"{name}/{pipeline}: {dict(counter.syncs)}"


def test_the_counter_sees_what_the_old_guard_did() -> None:
    """The count is not blind: the immediate check (``loss_is_finite``, one ``item`` per
    call, which the NCE classifier still uses) is counted."""
    model = NCL(
        SmallCNN(in_channels=3, width=8, out_dim=16), proj_hidden_dim=32, proj_output_dim=16
    )
    with OpCounter() as counter:
        assert model.loss_is_finite(torch.tensor(1.0))
    assert counter.syncs["item"] == 1
