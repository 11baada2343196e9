"""A loss forced to NaN/Inf at a chosen step: ``stop`` saves the last finite state and names
the step; ``skip`` leaves weights, optimiser state, buffers, kNN bank and EMA target as
they were and finishes the epoch. Also under real 2-process DDP (the ranks must agree)."""

from __future__ import annotations

import math
from datetime import timedelta
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.strategies import DDPStrategy
from torch import Tensor

from ncl_lightning.data import DigitsDataModule
from ncl_lightning.foundation.errors import NonFiniteLossError
from ncl_lightning.methods import BYOL, NCL, Encoded, NCEClassifier
from ncl_lightning.nn import SmallCNN

BAD_STEP = 3
BATCHES = 6
HINT = "set model.init_args.nonfinite_loss: skip to skip such batches"


def _poison(module: L.LightningModule, value: Tensor) -> Tensor:
    """``value`` plus NaN/Inf at the chosen step (and rank), else ``value``."""
    bad = module.bad_value
    if bad is None or module.trainer.global_step != module.bad_step:
        return value
    if module.bad_rank is not None and module.global_rank != module.bad_rank:
        return value
    return value + bad


class _PoisonedNCL(NCL):
    bad_value: float | None = None
    bad_step = BAD_STEP
    bad_rank: int | None = None

    def objective(self, views: list[Encoded]) -> Tensor:
        return _poison(self, super().objective(views))


class _PoisonedBYOL(BYOL):
    bad_value: float | None = None
    bad_step = BAD_STEP
    bad_rank: int | None = None

    def objective(self, views: list[Encoded]) -> Tensor:
        return _poison(self, super().objective(views))


class _PoisonedNCE(NCEClassifier):
    bad_value: float | None = None
    bad_step = BAD_STEP
    bad_rank: int | None = None

    def head(self, z: Tensor) -> Tensor:
        logits = super().head(z)
        return _poison(self, logits) if self.training else logits


class _CapturedNCL(_PoisonedNCL):
    compile_step = False  # the captured step's manual optimisation, its functions eager


def _ncl(bad: float | None, cls: type = _PoisonedNCL, **kw: Any) -> _PoisonedNCL:
    L.seed_everything(0, verbose=False)
    model = cls(
        SmallCNN(in_channels=1, width=8, out_dim=16), proj_hidden_dim=32, proj_output_dim=16,
        num_classes=10, batch_size=64, warmup_epochs=0, min_lr_ratio=1.0, **kw,
    )  # fmt: skip
    model.bad_value = bad
    return model


def _ncl_captured(bad: float | None, **kw: Any) -> _PoisonedNCL:
    """NCL with ``step_mode: compiled``: the verdict masks the update on the device."""
    return _ncl(bad, _CapturedNCL, step_mode="compiled", **kw)


def _nce(bad: float | None, **kw: Any) -> _PoisonedNCE:
    L.seed_everything(0, verbose=False)
    model = _PoisonedNCE(
        SmallCNN(in_channels=1, width=8, out_dim=16), num_classes=10, batch_size=64,
        min_lr_ratio=1.0, optimizer=lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9), **kw,
    )  # fmt: skip
    model.bad_value = bad
    return model


def _byol(bad: float | None, **kw: Any) -> _PoisonedBYOL:
    L.seed_everything(0, verbose=False)
    model = _PoisonedBYOL(
        SmallCNN(in_channels=1, width=8, out_dim=16), proj_hidden_dim=32, proj_output_dim=16,
        pred_hidden_dim=8, num_classes=10, batch_size=64, warmup_epochs=0, ema_decay=0.9, **kw,
    )  # fmt: skip
    model.bad_value = bad
    return model


def _fit(model: L.LightningModule, root: Path, callbacks=(), **kw: Any) -> L.Trainer:
    kw.setdefault("max_epochs", 1)
    trainer = L.Trainer(
        accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
        enable_model_summary=False, num_sanity_val_steps=0, limit_train_batches=BATCHES,
        limit_val_batches=1, default_root_dir=root,
        callbacks=[ModelCheckpoint(dirpath=root / "ckpt"), *callbacks], **kw,
    )  # fmt: skip
    n_views = 1 if isinstance(model, NCEClassifier) else 2
    trainer.fit(model, DigitsDataModule(batch_size=64, num_workers=0, n_views=n_views))
    return trainer


class _Snapshot(L.Callback):
    """Module state (parameters, buffers, optimiser state) before and after batch
    ``BAD_STEP``."""

    def __init__(self) -> None:
        self.before: dict[str, Tensor] = {}
        self.after: dict[str, Tensor] = {}

    @staticmethod
    def _state(trainer: L.Trainer, module: L.LightningModule) -> dict[str, Tensor]:
        state = {k: v.detach().clone() for k, v in module.state_dict().items()}
        for i, s in enumerate(trainer.optimizers[0].state.values()):
            state.update({f"opt.{i}.{k}": v.clone() for k, v in s.items()})
        return state

    def on_train_batch_start(self, trainer, module, batch, batch_idx) -> None:
        # At the start of the next batch: after the module's own batch-end hook (BYOL's EMA
        # update), which runs after the callbacks' one, and after the guard has judged the
        # last batch (and put back what a non-finite one changed), whichever callback runs
        # first.
        module.nonfinite_guard().resolve(trainer, module)
        if batch_idx in (BAD_STEP, BAD_STEP + 1):
            state = self._state(trainer, module)
            self.before, self.after = (state, {}) if batch_idx == BAD_STEP else (self.before, state)


# -- stop -------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize(
    ("make", "bad"),
    [(_ncl, math.nan), (_ncl, math.inf), (_nce, math.nan), (_ncl_captured, math.inf)],
    ids=["ncl-nan", "ncl-inf", "nce-nan", "ncl-captured-inf"],  # (inf logits: a NaN CE)
)
def test_stop_saves_the_last_finite_state_and_names_the_step(make, bad, tmp_path: Path) -> None:
    model = make(bad)
    with pytest.raises(NonFiniteLossError) as info:
        _fit(model, tmp_path / "run")
    message = str(info.value)
    path = tmp_path / "run" / "ckpt" / "last-finite.ckpt"
    kind = "nan" if math.isnan(bad) else "inf"
    assert "\n" not in message
    assert message.startswith(
        f"non-finite loss ({kind}) at step {BAD_STEP} (epoch 0, batch {BAD_STEP}); "
        "training stopped; last finite state saved to "
    )
    assert message.endswith(f"last-finite.ckpt; {HINT}") and path.is_file()

    reference = make(None)  # same seed, same data order: stops after BAD_STEP steps
    _fit(reference, tmp_path / "reference", max_steps=BAD_STEP)
    saved = torch.load(path, map_location="cpu", weights_only=True)
    expected = reference.state_dict()
    assert saved["state_dict"].keys() == expected.keys()
    for key, value in expected.items():
        assert torch.equal(saved["state_dict"][key], value), key
        if value.is_floating_point():
            assert torch.isfinite(saved["state_dict"][key]).all(), key
    # The guard judges a batch at the start of the next one (no host sync in the step),
    # when Lightning has counted the bad step: its counters count it as a skipped step,
    # so a resume goes on with the batch after the bad one.
    model_nce = isinstance(model, NCEClassifier)  # the classifier still checks at once
    assert saved["global_step"] == BAD_STEP + (0 if model_nce else 1)


def test_stop_without_a_trainer_still_raises() -> None:
    model = _ncl(None)
    with pytest.raises(NonFiniteLossError, match=r"^non-finite loss \(-inf\) in training_step"):
        model.loss_is_finite(torch.tensor(-math.inf))


# -- skip -------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize(
    ("make", "bad"),
    [(_ncl, math.nan), (_ncl, math.inf), (_nce, math.nan), (_ncl_captured, math.nan)],
    ids=["ncl-nan", "ncl-inf", "nce-nan", "ncl-captured-nan"],
)
def test_skip_leaves_everything_as_it_was_and_finishes_the_epoch(make, bad, tmp_path: Path) -> None:
    model = make(bad, nonfinite_loss="skip")
    snapshot = _Snapshot()
    with pytest.warns(UserWarning, match=r"epoch 0: skipped 1 batch\(es\) with a non-finite"):
        trainer = _fit(model, tmp_path, callbacks=[snapshot])
    assert trainer.current_epoch == 1 and not trainer.interrupted
    assert model.nonfinite_guard().skipped_total == 1
    assert trainer.callback_metrics["train/skipped_nonfinite"].item() == 1.0
    # The skipped batch moved nothing: weights, BatchNorm statistics, momentum buffers.
    assert snapshot.before.keys() == snapshot.after.keys()
    for key, value in snapshot.before.items():
        assert torch.equal(snapshot.after[key], value), key
    assert model.last_step_skipped is False  # later steps trained again
    assert all(torch.isfinite(p).all() for p in model.parameters())
    # Lightning still counts the (no-op) optimiser step of the skipped batch.
    assert trainer.global_step == BATCHES
    if isinstance(model, NCL):  # the skipped batch never entered the kNN bank
        assert len(model.online._bank) == BATCHES - 1
    assert (
        torch.load(  # the count survives in checkpoints
            tmp_path / "ckpt" / "epoch=0-step=6.ckpt", weights_only=True
        )["nonfinite_skipped"]
        == 1
    )


@pytest.mark.slow
def test_skip_does_not_move_the_byol_target(tmp_path: Path) -> None:
    model = _byol(math.nan, nonfinite_loss="skip")
    snapshot = _Snapshot()
    with pytest.warns(UserWarning, match="skipped 1 batch"):
        _fit(model, tmp_path, callbacks=[snapshot])
    target = [k for k in snapshot.before if k.startswith("target_")]
    assert target and all(torch.equal(snapshot.before[k], snapshot.after[k]) for k in target)
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_skip_returns_a_zero_loss_that_reaches_every_parameter() -> None:
    model = _ncl(None, nonfinite_loss="skip")
    assert not model.loss_is_finite(torch.tensor(math.nan))
    loss = model.skipped_step_loss()
    loss.backward()
    assert loss.item() == 0.0
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert all(g is not None and not g.any() for g in grads)


# -- DDP --------------------------------------------------------------------------------
class _RecordRanks(L.Callback):
    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def on_train_end(self, trainer, module) -> None:
        out = {
            "params": {k: v.detach().clone() for k, v in module.named_parameters()},
            "skipped": module.nonfinite_guard().skipped_total,
            "global_step": trainer.global_step,
        }
        torch.save(out, self.folder / f"rank{trainer.global_rank}.pt")


def _fit_ddp(model: L.LightningModule, root: Path) -> None:
    trainer = L.Trainer(
        accelerator="cpu", devices=2, logger=False,
        # A rank left waiting on a collective fails after a minute instead of hanging.
        strategy=DDPStrategy(start_method="spawn", timeout=timedelta(seconds=60)),
        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
        max_epochs=1, limit_train_batches=BATCHES, limit_val_batches=0, default_root_dir=root,
        callbacks=[ModelCheckpoint(dirpath=root / "ckpt"), _RecordRanks(root)],
    )  # fmt: skip
    trainer.fit(model, DigitsDataModule(batch_size=32, num_workers=0, n_views=2))


@pytest.mark.ddp
@pytest.mark.slow
@pytest.mark.parametrize("make", [_ncl, _ncl_captured], ids=["eager", "captured"])
def test_ddp_ranks_agree_to_skip_a_loss_that_is_nan_on_one_rank(make, tmp_path: Path) -> None:
    model = make(math.nan, nonfinite_loss="skip")
    model.bad_rank = 1  # rank 0's loss is finite; it must skip too, not hang
    _fit_ddp(model, tmp_path)
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in range(2)]
    assert [r["skipped"] for r in ranks] == [1, 1]
    assert [r["global_step"] for r in ranks] == [BATCHES, BATCHES]
    for key, value in ranks[0]["params"].items():
        assert torch.equal(ranks[1]["params"][key], value), key
        assert torch.isfinite(value).all(), key


@pytest.mark.ddp
@pytest.mark.slow
def test_ddp_ranks_agree_to_stop_on_a_loss_that_is_inf_on_one_rank(tmp_path: Path) -> None:
    model = _ncl(math.inf)
    model.bad_rank = 1
    with pytest.raises(Exception, match=rf"non-finite loss \(inf\) at step {BAD_STEP}"):
        _fit_ddp(model, tmp_path)
    assert (tmp_path / "ckpt" / "last-finite.ckpt").is_file()
