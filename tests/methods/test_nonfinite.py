"""A loss forced to NaN/Inf at a chosen step: ``stop`` saves the last finite state and names
the step; ``skip`` leaves weights, optimiser state, buffers, kNN bank and EMA target as
they were and finishes the epoch. Also under real 2-process DDP (the ranks must agree)."""

from __future__ import annotations

import math
import os
import re
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
import torch.distributed as dist
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.strategies import DDPStrategy
from torch import Tensor

from ncl_lightning.data import DigitsDataModule
from ncl_lightning.foundation.errors import NonFiniteLossError
from ncl_lightning.methods import BYOL, NCL, BayesNCL, Encoded, NCEClassifier
from ncl_lightning.nn import SmallCNN
from tests.gloo_group import spawn
from tests.helpers.cluster import free_port
from tests.methods.grad_poison import Poison

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
    ``BAD_STEP``; ``module_keys``: the keys of the module's own state dict."""

    def __init__(self) -> None:
        self.before: dict[str, Tensor] = {}
        self.after: dict[str, Tensor] = {}
        self.module_keys: list[str] = []

    def _state(self, trainer: L.Trainer, module: L.LightningModule) -> dict[str, Tensor]:
        state = {k: v.detach().clone() for k, v in module.state_dict().items()}
        self.module_keys = list(state)
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


# One ``skip`` fit per case (NaN at BAD_STEP), shared by its skip test and its stop test: the
# state it had before the bad step is the state ``stop`` must save (same seed, same data
# order). The tests of a case share an xdist group, so that one worker fits it once.
CASES: dict[str, Callable[..., L.LightningModule]] = {
    "ncl": _ncl, "nce": _nce, "ncl-captured": _ncl_captured,
}  # fmt: skip
SKIPPED = r"epoch 1: skipped 1 batch\(es\) with a non-finite"


@dataclass
class _SkipRun:
    model: L.LightningModule
    trainer: L.Trainer
    snapshot: _Snapshot
    root: Path
    warnings: list[str]


_SKIP_RUNS: dict[str, _SkipRun] = {}


def _skip_run(case: str, tmp_path_factory: pytest.TempPathFactory) -> _SkipRun:
    if case not in _SKIP_RUNS:
        root = tmp_path_factory.mktemp(f"skip-{case}")
        model = CASES[case](math.nan, nonfinite_loss="skip")
        snapshot = _Snapshot()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            trainer = _fit(model, root, callbacks=[snapshot])
        said = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
        _SKIP_RUNS[case] = _SkipRun(model, trainer, snapshot, root, said)
    return _SKIP_RUNS[case]


def _case(case: str, *values: Any) -> Any:
    return pytest.param(case, *values, id=case, marks=pytest.mark.xdist_group(f"nonfinite-{case}"))


# -- stop -------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize(
    ("case", "bad"),
    # eager NCL with inf: the DDP stop test below; inf logits make a NaN CE
    [_case("ncl", math.nan), _case("nce", math.nan), _case("ncl-captured", math.inf)],
)
def test_stop_saves_the_last_finite_state_and_names_the_step(
    case: str, bad: float, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    model = CASES[case](bad)
    with pytest.raises(NonFiniteLossError) as info:
        _fit(model, tmp_path / "run")
    message = str(info.value)
    path = tmp_path / "run" / "ckpt" / "last-finite.ckpt"
    kind = "nan" if math.isnan(bad) else "inf"
    assert "\n" not in message
    assert message.startswith(
        f"non-finite loss ({kind}) at step {BAD_STEP} (epoch 1, batch {BAD_STEP}); "
        "training stopped; last finite state saved to "
    )
    assert message.endswith(f"last-finite.ckpt; {HINT}") and path.is_file()

    # The reference: the same model, seed and data order after BAD_STEP finite steps (the
    # skip run of this case at the start of its bad batch).
    snapshot = _skip_run(case, tmp_path_factory).snapshot
    saved = torch.load(path, map_location="cpu", weights_only=True)
    expected = {k: snapshot.before[k] for k in snapshot.module_keys}
    assert expected and saved["state_dict"].keys() == expected.keys()
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
# (skip acts on any non-finite loss code; nan and inf differ only in stop's message)
@pytest.mark.parametrize("case", [_case("ncl"), _case("nce"), _case("ncl-captured")])
def test_skip_leaves_everything_as_it_was_and_finishes_the_epoch(
    case: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    run = _skip_run(case, tmp_path_factory)
    model, trainer, snapshot = run.model, run.trainer, run.snapshot
    assert any(re.search(SKIPPED, said) for said in run.warnings), run.warnings
    assert trainer.current_epoch == 1 and not trainer.interrupted
    assert model.nonfinite_guard().skipped_total == 1
    assert trainer.callback_metrics["train/skipped_nonfinite"].item() == 1.0
    # The skipped batch moved nothing: weights, BatchNorm statistics, momentum buffers.
    assert snapshot.before and snapshot.before.keys() == snapshot.after.keys()
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
            run.root / "ckpt" / "epoch=0-step=6.ckpt", weights_only=True
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
# Every DDP fit of this file and of test_nonfinite_gradients.py runs in one spawned pair of
# processes (a rank pays the imports of torch, Lightning and the package; the fits are
# short): the ranks start Lightning's DDP themselves (``LOCAL_RANK`` etc. set, as torchrun
# does), and each fit is judged by its test from what the ranks recorded.
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


def _fit_ddp(model: L.LightningModule, root: Path, callbacks=(), **kw: Any) -> None:
    kw.setdefault("limit_train_batches", BATCHES)
    trainer = L.Trainer(
        accelerator="cpu", devices=2, logger=False,
        # A rank left waiting on a collective fails after a minute instead of hanging.
        strategy=DDPStrategy(timeout=timedelta(seconds=60)),
        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
        max_epochs=1, limit_val_batches=0, default_root_dir=root,
        callbacks=[*callbacks, _RecordRanks(root)], **kw,
    )  # fmt: skip
    trainer.fit(model, DigitsDataModule(batch_size=32, num_workers=0, n_views=2))


def _skip_on_rank1(make) -> Callable[[Path], None]:
    def run(root: Path) -> None:
        model = make(math.nan, nonfinite_loss="skip")
        model.bad_rank = 1  # rank 0's loss is finite; it must skip too, not hang
        _fit_ddp(model, root, [ModelCheckpoint(dirpath=root / "ckpt")])

    return run


GRAD_BAD_STEP = 2  # test_nonfinite_gradients.py's
GRAD_TARGET = "projector.net.0.weight"


def _skip_gradient_inf_on_rank1(root: Path) -> None:
    """test_nonfinite_gradients.py's DDP run: BayesNCL, an inf gradient on rank 1."""
    L.seed_everything(0, verbose=False)
    model = BayesNCL(
        SmallCNN(1, 8, 16), proj_hidden_dim=32, proj_output_dim=16, num_classes=10,
        batch_size=32, warmup_epochs=0, nonfinite_loss="skip",
    )  # fmt: skip
    poison = Poison(GRAD_BAD_STEP, GRAD_TARGET, "inf", rank=1, record=str(root))
    _fit_ddp(model, root, [poison], limit_train_batches=4, enable_checkpointing=False)


def _stop_on_rank1(root: Path) -> None:
    model = _ncl(math.inf)
    model.bad_rank = 1
    _fit_ddp(model, root, [ModelCheckpoint(dirpath=root / "ckpt")])


DDP_RUNS: dict[str, Callable[[Path], None]] = {
    "skip-eager": _skip_on_rank1(_ncl),
    "skip-captured": _skip_on_rank1(_ncl_captured),
    "skip-gradient": _skip_gradient_inf_on_rank1,
    "stop": _stop_on_rank1,  # last: the fits after an exception would start from its state
}


def _ddp_rank(rank: int, port: int, root: str) -> None:
    """One rank: every run of :data:`DDP_RUNS` in ``<root>/<name>``; save ``{name: error
    message or None}`` to ``<root>/errors<rank>.pt``."""
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE="2", RANK=str(rank),
        LOCAL_RANK=str(rank), NODE_RANK="0",
    )  # fmt: skip
    errors: dict[str, str | None] = {}
    for name, run in DDP_RUNS.items():
        folder = Path(root) / name
        folder.mkdir(parents=True, exist_ok=True)
        try:
            run(folder)
            errors[name] = None
        except Exception as error:
            errors[name] = f"{type(error).__name__}: {error}\n{traceback.format_exc()}"
    torch.save(errors, Path(root) / f"errors{rank}.pt")
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


_DDP: dict[str, Any] = {}


def ddp_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    """The folder of the DDP runs and each rank's errors, the pair spawned on the first
    call in this pytest process (tests using it carry ``xdist_group("nonfinite-ddp")``)."""
    if not _DDP:
        root = tmp_path_factory.mktemp("nonfinite-ddp")
        port = free_port()
        spawn(_ddp_rank, [(r, port, str(root)) for r in range(2)], timeout=400)
        errors = [torch.load(root / f"errors{r}.pt", weights_only=True) for r in range(2)]
        _DDP.update(root=root, errors=errors)
    return _DDP["root"], _DDP["errors"]


def ddp_run(tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    """The folder of DDP run ``name``, which must have finished on both ranks."""
    root, errors = ddp_runs(tmp_path_factory)
    for rank in range(2):
        assert errors[rank][name] is None, f"rank {rank}: {errors[rank][name]}"
    return root / name


@pytest.mark.ddp
@pytest.mark.slow
@pytest.mark.xdist_group("nonfinite-ddp")
@pytest.mark.parametrize("name", ["skip-eager", "skip-captured"])
def test_ddp_ranks_agree_to_skip_a_loss_that_is_nan_on_one_rank(
    name: str, tmp_path_factory
) -> None:
    folder = ddp_run(tmp_path_factory, name)
    ranks = [torch.load(folder / f"rank{r}.pt", weights_only=True) for r in range(2)]
    assert [r["skipped"] for r in ranks] == [1, 1]
    assert [r["global_step"] for r in ranks] == [BATCHES, BATCHES]
    for key, value in ranks[0]["params"].items():
        assert torch.equal(ranks[1]["params"][key], value), key
        assert torch.isfinite(value).all(), key


@pytest.mark.ddp
@pytest.mark.slow
@pytest.mark.xdist_group("nonfinite-ddp")
def test_ddp_ranks_agree_to_stop_on_a_loss_that_is_inf_on_one_rank(tmp_path_factory) -> None:
    root, errors = ddp_runs(tmp_path_factory)
    for rank in range(2):  # both ranks stop (rank 0's loss was finite), neither hangs
        message = errors[rank]["stop"]
        assert message is not None, f"rank {rank} did not stop"
        assert re.search(rf"non-finite loss \(inf\) at step {BAD_STEP}", message), message
    assert (root / "stop" / "ckpt" / "last-finite.ckpt").is_file()
