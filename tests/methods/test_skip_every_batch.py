"""``nonfinite_loss: skip`` is for a rare bad batch: a run whose every batch is non-finite
stops with one line naming the last fault (exit status 1, last finite state saved) instead
of ending with status 0 having trained nothing; a gradient that overflows names the
parameter with the largest element and, for a tiny temperature, the temperature."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import pytest
import torch

from ncl_lightning.methods import guard
from ncl_lightning.methods.faults import GRAD_NONFINITE, describe_gradients
from ncl_lightning.methods.guard import CONSECUTIVE_SKIP_LIMIT
from ncl_lightning.runtime.cli import main
from tests.helpers.cli import DEMO

TARGET = "projector.net.0.weight"
# The demo config at test size: what is checked does not depend on the widths.
SMALL = [
    "--data.init_args.batch_size", "32", "--model.init_args.backbone.init_args.width", "8",
    "--model.init_args.backbone.init_args.out_dim", "16",
    "--model.init_args.proj_hidden_dim", "32", "--model.init_args.proj_output_dim", "16",
]  # fmt: skip


class PoisonEvery(L.Callback):
    """Set the first element of a gradient to inf after every backward from step
    ``start`` on (``ncl-cli`` loads it by ``class_path``)."""

    def __init__(self, target: str = TARGET, start: int = 0) -> None:
        self.target, self.start = target, start

    def on_after_backward(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        if trainer.global_step >= self.start:
            dict(module.named_parameters())[self.target].grad.view(-1)[0] = float("inf")


def _fit(tmp_path: Path, capsys: pytest.CaptureFixture, *extra: str) -> tuple[int, str]:
    out = tmp_path / "out"
    args = [
        "fit", "--config", str(DEMO / "digits_ncl.yaml"),
        "--trainer.default_root_dir", str(out), "--trainer.logger.init_args.save_dir", str(out),
        "--trainer.enable_progress_bar", "false", "--trainer.num_sanity_val_steps", "0",
        "--trainer.limit_val_batches", "1", "--model.init_args.nonfinite_loss", "skip",
        "--trainer.callbacks+", f"{__name__}.PoisonEvery", *SMALL, *extra,
    ]  # fmt: skip
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    lines = [x for x in capsys.readouterr().err.splitlines() if x.startswith("ncl-cli: error:")]
    assert len(lines) == 1, lines
    return int(exit_info.value.code), lines[0]


def test_a_skip_run_that_skips_every_batch_of_an_epoch_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    code, line = _fit(
        tmp_path, capsys, "--trainer.max_epochs", "1", "--trainer.limit_train_batches", "4"
    )
    assert code == 1
    assert "nonfinite_loss: skip skipped every batch of epoch 1 (4 of 4), nothing trained" in line
    assert f"last: non-finite gradient of {TARGET} (inf) at step 3 (epoch 1, batch 3)" in line
    assert "last-finite.ckpt" in line
    assert next((tmp_path / "out").rglob("last-finite.ckpt")).is_file()


def test_max_steps_within_an_epoch_counts_too(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    code, line = _fit(tmp_path, capsys, "--trainer.max_steps", "3")
    assert code == 1
    assert "skipped every batch of epoch 1 (3 of 3)" in line


def test_a_run_with_finite_batches_still_finishes(tmp_path: Path) -> None:
    """A fault from step 2 on, epoch of 4 batches: 2 trained, 2 skipped, exit 0."""
    out = tmp_path / "out"
    main([
        "fit", "--config", str(DEMO / "digits_ncl.yaml"),
        "--trainer.default_root_dir", str(out), "--trainer.logger.init_args.save_dir", str(out),
        "--trainer.enable_progress_bar", "false", "--trainer.num_sanity_val_steps", "0",
        "--trainer.limit_val_batches", "1", "--model.init_args.nonfinite_loss", "skip",
        "--trainer.max_epochs", "1", "--trainer.limit_train_batches", "4",
        "--trainer.callbacks+", f"{__name__}.PoisonEvery", "--trainer.callbacks.start", "2",
        *SMALL,
    ])  # fmt: skip
    assert next(out.rglob("last.ckpt")).is_file()
    assert not list(out.rglob("last-finite.ckpt"))


def test_skips_in_a_row_stop_a_long_epoch(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An epoch longer than the limit stops at the limit, not at its end."""
    assert CONSECUTIVE_SKIP_LIMIT == 100  # the documented value
    monkeypatch.setattr(guard, "CONSECUTIVE_SKIP_LIMIT", 3)
    code, line = _fit(
        tmp_path, capsys, "--trainer.max_epochs", "1", "--trainer.limit_train_batches", "8"
    )
    assert code == 1
    assert "skipped 3 batches in a row, nothing trained (last: " in line
    assert "at step 2 (epoch 1, batch 2)" in line


def test_an_overflowing_gradient_names_its_largest_element_and_the_temperature() -> None:
    """Finite elements whose squared sum overflows: every per-parameter 2-norm is inf, so
    the culprit is the largest element, not the largest finite norm (the probe's)."""
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
    module.hparams = {"temperature": 1e-19}  # type: ignore[assignment]
    module[0].weight.grad = torch.full((4, 4), 3e28)  # norm 1.2e29 ** 2: overflows
    module[1].weight.grad = torch.full((2, 4), 0.25)
    text = describe_gradients(GRAD_NONFINITE, module)
    assert text.startswith("gradient norm overflows float32 (largest element: 0.weight 3e+28)")
    assert "1/temperature = 1e+19: raise model.init_args.temperature" in text
    module.hparams = {"temperature": 0.2}  # type: ignore[assignment]
    assert "temperature" not in describe_gradients(GRAD_NONFINITE, module)
