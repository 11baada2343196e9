"""A finite loss with a non-finite (or, with ``grad_norm_limit``, too large) gradient, or a
parameter made non-finite by an optimiser step, through ``ncl-cli fit``: ``stop`` saves the
last finite state and names the step and the parameter, ``skip`` leaves the weights as they
were; ranks agree under DDP. BayesNCL on the checkpoint-test seeds that blew up (issue 17)
now trains with finite, bounded weights and the guard stays silent on healthy runs."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.methods import BayesNCL
from ncl_lightning.nn import SmallCNN
from ncl_lightning.runtime.cli import main
from tests.checkpoints.test_checkpoint import FACTORIES, _fit_and_save
from tests.conftest import ROOT
from tests.methods.test_nonfinite import GRAD_BAD_STEP, GRAD_TARGET, ddp_run

BAD_STEP = 2
TARGET = "projector.net.0.weight"
HINT = "set model.init_args.nonfinite_loss: skip to skip such batches"
POISON = "tests.methods.grad_poison.Poison"
# The demo config at test size: what is checked does not depend on the widths.
SMALL = [
    "--data.init_args.batch_size", "32", "--model.init_args.backbone.init_args.width", "8",
    "--model.init_args.backbone.init_args.out_dim", "16",
    "--model.init_args.proj_hidden_dim", "32", "--model.init_args.proj_output_dim", "16",
]  # fmt: skip


def _args(out: Path, *extra: str) -> list[str]:
    return [
        "fit", "--config", str(ROOT / "configs" / "demo" / "digits_bayesncl.yaml"),
        "--trainer.default_root_dir", str(out), "--trainer.logger.init_args.save_dir", str(out),
        "--trainer.max_epochs", "1", "--trainer.max_steps", "4",
        "--trainer.limit_val_batches", "0", "--trainer.enable_progress_bar", "false",
        *SMALL, *extra,
    ]  # fmt: skip


def _poison(**init: object) -> list[str]:
    args = ["--trainer.callbacks+", POISON]
    for key, value in init.items():
        args += [f"--trainer.callbacks.init_args.{key}", str(value)]
    return args


def _error_line(capsys: pytest.CaptureFixture) -> str:
    (line,) = [x for x in capsys.readouterr().err.splitlines() if x.startswith("ncl-cli: error:")]
    return line.removeprefix("ncl-cli: error: ")


@pytest.mark.slow
def test_stop_on_an_inf_gradient_with_a_finite_loss(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "out"
    poison = _poison(step=BAD_STEP, target=TARGET, record=tmp_path)
    with pytest.raises(SystemExit) as info:
        main(_args(out, *poison))
    assert info.value.code == 1
    line = _error_line(capsys)
    (path,) = out.rglob("last-finite.ckpt")
    assert line == (
        f"non-finite gradient of {TARGET} (inf) at step {BAD_STEP} (epoch 1, batch {BAD_STEP}); "
        f"training stopped; last finite state saved to {path}; {HINT}"
    )
    saved = torch.load(path, map_location="cpu", weights_only=True)
    before = torch.load(tmp_path / "before-rank0.pt", weights_only=True)
    # Judged at the start of the next batch (no host sync in the step): Lightning has
    # counted the bad step by then, as it counts a skipped one; the weights are those the
    # bad step started from.
    assert saved["global_step"] == BAD_STEP + 1
    for key, value in saved["state_dict"].items():  # the state the bad step started from
        assert torch.equal(value, before[key]), key
        if value.is_floating_point():
            assert torch.isfinite(value).all(), key


@pytest.mark.slow
def test_skip_an_inf_gradient_leaves_the_weights_as_they_were(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Also: a ``grad_norm_limit`` far above this model's gradient norms (tens) lets the
    three healthy steps through (one skip: the poisoned step's)."""
    out = tmp_path / "out"
    poison = _poison(step=BAD_STEP, target=TARGET, value="nan", record=tmp_path)
    limit = ["--model.init_args.grad_norm_limit", "1e6"]
    with pytest.warns(UserWarning, match=r"epoch 1: skipped 1 batch\(es\) with a non-finite"):
        main(_args(out, "--model.init_args.nonfinite_loss", "skip", *limit, *poison))
    before = torch.load(tmp_path / "before-rank0.pt", weights_only=True)
    after = torch.load(tmp_path / "after-rank0.pt", weights_only=True)
    assert before.keys() == after.keys()
    for key, value in before.items():  # weights, BatchNorm statistics, momentum
        assert torch.equal(after[key], value), key
    last = torch.load(next(out.rglob("last.ckpt")), weights_only=True)
    assert last["global_step"] == 4 and last["nonfinite_skipped"] == 1
    assert all(torch.isfinite(v).all() for v in last["state_dict"].values())


@pytest.mark.slow
def test_a_parameter_made_non_finite_by_a_step_stops_under_both_modes(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "out"
    poison = _poison(step=1, target=TARGET, value="nan", what="parameter")
    with pytest.raises(SystemExit) as info:
        main(_args(out, "--model.init_args.nonfinite_loss", "skip", *poison))
    assert info.value.code == 1
    assert _error_line(capsys).startswith(
        f"non-finite parameter {TARGET} (nan) at step 2 (epoch 1, batch 2), from an "
        "optimiser step with finite gradients; training stopped; no finite state left to save"
    )
    assert not list(out.rglob("last-finite.ckpt"))


@pytest.mark.slow
def test_grad_norm_limit_stops_a_step_above_it(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    # A limit below this model's gradient norms: the first step stops, naming the norm and
    # the largest gradient. (A limit far above them lets healthy steps through: the skip
    # test above.)
    with pytest.raises(SystemExit):
        main(_args(tmp_path / "low", "--model.init_args.grad_norm_limit", "0.001"))
    line = _error_line(capsys)
    assert line.startswith("gradient norm ") and " above grad_norm_limit 0.001 (largest: " in line
    assert " at step 0 (epoch 1, batch 0); training stopped; last finite state saved to " in line


def test_grad_norm_limit_is_checked() -> None:
    for bad in (0.0, -1.0, math.nan, math.inf):
        with pytest.raises(ConfigError, match=r"^grad_norm_limit must be"):
            BayesNCL(SmallCNN(1, 8, 16), batch_size=64, grad_norm_limit=bad)


# -- the blow-up of issue 17: BayesNCL in the checkpoint-test fixture -------------------------
@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 3])
def test_bayesncl_on_the_seeds_that_blew_up_keeps_finite_bounded_weights(
    seed: int, tmp_path: Path
) -> None:
    # The fixture's exact sequence: CL, NCL, then BayesNCL, 2 steps each, from one seed.
    # Before the fix: BatchNorm weights 1e8-1e9 after 2 steps, gradient norms 5e10-5e11.
    torch.manual_seed(seed)
    models = {}
    for name in ("cl", "ncl", "bayesncl"):
        models[name] = FACTORIES[name]()
        _fit_and_save(models[name], tmp_path / f"{name}.ckpt")
    for key, value in models["bayesncl"].state_dict().items():
        if value.is_floating_point():
            assert value.abs().max() < 100.0, key  # healthy: below 10
    assert models["bayesncl"].nonfinite_guard().skipped_total == 0


# -- DDP ------------------------------------------------------------------------------
@pytest.mark.ddp
@pytest.mark.slow
@pytest.mark.xdist_group("nonfinite-ddp")
def test_ddp_ranks_agree_to_skip_a_gradient_that_is_inf_on_one_rank(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    # BayesNCL, 4 steps, an inf gradient of TARGET at step BAD_STEP on rank 1: the run
    # "skip-gradient" of test_nonfinite.py's spawned DDP pair
    assert (GRAD_BAD_STEP, GRAD_TARGET) == (BAD_STEP, TARGET)
    folder = ddp_run(tmp_path_factory, "skip-gradient")
    ranks = [torch.load(folder / f"rank{r}.pt", weights_only=True) for r in range(2)]
    assert [r["skipped"] for r in ranks] == [1, 1]  # rank 0's gradients were finite
    for key, value in ranks[0]["params"].items():
        assert torch.equal(ranks[1]["params"][key], value), key
        assert torch.isfinite(value).all(), key
    for r in range(2):  # the poisoned step moved nothing on either rank
        before = torch.load(folder / f"before-rank{r}.pt", weights_only=True)
        after = torch.load(folder / f"after-rank{r}.pt", weights_only=True)
        assert all(torch.equal(after[k], v) for k, v in before.items())
