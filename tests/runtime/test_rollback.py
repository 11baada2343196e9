"""The deferred non-finite check: a step judged one batch later is undone exactly (weights,
optimiser state, buffers), a checkpoint never holds a step found non-finite afterwards, and
gradient accumulation drops the window of a non-finite micro-batch."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from torch import nn

from ncl_lightning.foundation.errors import NonFiniteLossError
from ncl_lightning.methods.guard import Verdict
from ncl_lightning.methods.rollback import StepSnapshot
from ncl_lightning.optim import LARS
from tests.methods.test_nonfinite import BAD_STEP, BATCHES, _fit, _ncl


def _state(module: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, object]:
    state = {f"p.{k}": v.detach().clone() for k, v in module.named_parameters()}
    for i, s in enumerate(optimizer.state.values()):
        for k, v in s.items():
            state[f"s.{i}.{k}"] = v.clone() if isinstance(v, torch.Tensor) else v
    return state


def _step(module: nn.Module, optimizer: torch.optim.Optimizer, seed: int) -> None:
    torch.manual_seed(seed)
    optimizer.zero_grad()
    module(torch.randn(4, 3)).square().sum().backward()
    optimizer.step()


@pytest.mark.parametrize(
    "make",
    [
        lambda p: LARS(p, lr=0.1, weight_decay=1e-4),
        lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
        lambda p: torch.optim.Adam(p, lr=0.01),
    ],
    ids=["lars", "sgd-momentum", "adam"],
)
@pytest.mark.parametrize("steps_before", [0, 2])
def test_snapshot_restores_weights_and_optimiser_state_exactly(make, steps_before: int) -> None:
    """After a step is undone, parameters and optimiser state equal those before it, bit
    for bit, including state the step created (the first momentum buffer, Adam's moments)
    and non-tensor state; training then goes on as if the step never happened."""
    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(3, 5), nn.ReLU(), nn.Linear(5, 2))
    optimizer = make(module.parameters())
    for i in range(steps_before):
        _step(module, optimizer, seed=i)
    before = _state(module, optimizer)
    snapshot = StepSnapshot()
    snapshot.take(module, optimizer)
    _step(module, optimizer, seed=99)  # the step to undo
    assert _state(module, optimizer).keys() >= before.keys()
    snapshot.restore(optimizer)
    after = _state(module, optimizer)
    assert after.keys() == before.keys()
    for key, value in before.items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(after[key], value), key
        else:
            assert after[key] == value, key
    _step(module, optimizer, seed=7)
    # A run that never took the undone step ends in the same place.
    torch.manual_seed(0)
    twin = nn.Sequential(nn.Linear(3, 5), nn.ReLU(), nn.Linear(5, 2))
    twin_opt = make(twin.parameters())
    for i in [*range(steps_before), 7]:
        _step(twin, twin_opt, seed=i)
    for a, b in zip(module.parameters(), twin.parameters(), strict=True):
        assert torch.equal(a, b)


def test_verdict_reads_what_was_published() -> None:
    verdict = Verdict((3, 0, 3), stepped=True)
    verdict.publish(torch.tensor(30.0))
    assert verdict.read() == 30.0
    assert Verdict(None, stepped=False).read() == 0.0  # nothing published: finite


@pytest.mark.slow
def test_stop_never_writes_a_checkpoint_of_the_non_finite_step(tmp_path: Path) -> None:
    """A checkpoint due right after the non-finite step (every step here) makes the guard
    judge that step first: it stops, writes last-finite.ckpt with the state the step
    started from, and the step's own checkpoint is never written."""
    every = ModelCheckpoint(dirpath=tmp_path / "every", every_n_train_steps=1, save_top_k=-1)
    with pytest.raises(NonFiniteLossError, match=rf"at step {BAD_STEP} "):
        _fit(_ncl(math.nan), tmp_path / "run", callbacks=[every])
    written = sorted(p.name for p in (tmp_path / "every").iterdir())
    assert written == [f"epoch=0-step={s}.ckpt" for s in range(1, BAD_STEP + 1)]
    finite = torch.load(tmp_path / "run" / "ckpt" / "last-finite.ckpt", weights_only=True)
    last_good = torch.load(tmp_path / "every" / written[-1], weights_only=True)
    for key, value in last_good["state_dict"].items():
        assert torch.equal(finite["state_dict"][key], value), key


@pytest.mark.slow
def test_skip_takes_the_non_finite_step_out_of_a_checkpoint_due_right_after(
    tmp_path: Path,
) -> None:
    """Under skip, the checkpoint saved at the end of the non-finite step holds the weights
    from before it (the step judged and undone before the save), not NaN."""
    every = ModelCheckpoint(dirpath=tmp_path / "every", every_n_train_steps=1, save_top_k=-1)
    with pytest.warns(UserWarning, match="skipped 1 batch"):
        _fit(_ncl(math.nan, nonfinite_loss="skip"), tmp_path / "run", callbacks=[every])
    before = torch.load(tmp_path / "every" / f"epoch=0-step={BAD_STEP}.ckpt", weights_only=True)
    at_bad = torch.load(tmp_path / "every" / f"epoch=0-step={BAD_STEP + 1}.ckpt", weights_only=True)
    assert at_bad["nonfinite_skipped"] == 1
    for key, value in before["state_dict"].items():
        assert torch.equal(at_bad["state_dict"][key], value), key


@pytest.mark.slow
def test_skip_under_gradient_accumulation_drops_the_window(tmp_path: Path) -> None:
    """With two micro-batches per optimiser step and both micro-batches of step 1
    non-finite, both are skipped (the first drops its window's gradients, the second's
    step is undone) and training finishes with finite weights."""
    model = _ncl(math.nan, nonfinite_loss="skip")
    model.bad_step = 1  # global_step counts optimiser steps: batches 2 and 3
    start = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.warns(UserWarning, match=r"skipped 2 batch\(es\)"):
        trainer = _fit(model, tmp_path, accumulate_grad_batches=2)
    assert model.nonfinite_guard().skipped_total == 2
    assert trainer.global_step == BATCHES // 2
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert any(not torch.equal(start[k], v) for k, v in model.state_dict().items())
