"""Issue 33, finding 7: every ``trainer`` value means what the user typed, or is refused
in one line before anything is written.

``limit_train_batches: 1`` is one batch per epoch and ``1.0`` every batch (Lightning's
two meanings), on the command line and in a config file; what Lightning refuses when it
builds the Trainer is one line; the true-precision settings train with both augmentation
pipelines (the device one converted its float32 views before: a dtype error at the first
batch).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ncl_lightning.runtime.cli import cli_main
from tests.helpers.cli import DEMO, refused_fit

# The demo's model, narrower: what is checked is the trainer's reading of its values.
NARROW = [
    "--model.init_args.backbone.init_args.width", "8",
    "--model.init_args.backbone.init_args.out_dim", "32",
    "--model.init_args.proj_hidden_dim", "32",
    "--model.init_args.proj_output_dim", "16",
]  # fmt: skip


def _fit(tmp: Path, *extra: str, config: str | None = None):
    out = tmp / "out"
    args = [
        "fit", "--config", str(DEMO / "digits_ncl.yaml"),
        *(["--config", config] if config else []),
        "--trainer.default_root_dir", str(out), "--trainer.logger.init_args.save_dir", str(out),
        "--trainer.enable_progress_bar", "false", "--trainer.num_sanity_val_steps", "0",
        "--trainer.limit_val_batches", "1", "--trainer.max_epochs", "1", *NARROW, *extra,
    ]  # fmt: skip
    return cli_main(args).trainer


@pytest.mark.parametrize(("typed", "batches"), [("1", 1), ("1.0", 11), ("3", 3), ("3.0", 3)])
def test_limit_train_batches_is_what_was_typed(tmp_path: Path, typed: str, batches: int) -> None:
    """The digits training split has 11 batches of 128: ``1`` is one of them, ``1.0`` all."""
    trainer = _fit(tmp_path, "--trainer.limit_train_batches", typed)
    assert trainer.num_training_batches == batches
    assert trainer.global_step == batches


@pytest.mark.parametrize(("typed", "batches"), [("1", 1), ("1.0", 11)])
def test_the_same_in_a_config_file(tmp_path: Path, typed: str, batches: int) -> None:
    config = tmp_path / "limit.yaml"
    config.write_text(f"trainer:\n  limit_train_batches: {typed}\n")
    # one step: the number of batches an epoch is known when the fit starts
    trainer = _fit(tmp_path, "--trainer.max_steps", "1", config=str(config))
    assert trainer.num_training_batches == batches and trainer.global_step == 1
    saved = next((tmp_path / "out").rglob("config.yaml")).read_text()
    assert f"limit_train_batches: {typed}\n" in saved  # the record keeps the type


def test_val_check_interval_int_and_float(tmp_path: Path) -> None:
    """Read when the fit starts: one step each (``1`` would validate after every batch)."""
    for name, typed, batch in (("a", "1", 1), ("b", "1.0", 11)):
        trainer = _fit(tmp_path / name, "--trainer.val_check_interval", typed,
                       "--trainer.max_steps", "1")  # fmt: skip
        assert trainer.val_check_batch == batch and trainer.global_step == 1


# Lightning refuses these when it builds the Trainer (its message, naming the key or
# the value), in one line, before anything is written.
REFUSED = {
    "max_time HH:MM:SS": (["--trainer.max_time", "01:00:00"], "Timer(duration='01:00:00')"),
    "max_time unit": (["--trainer.max_time", "{hour: 1}"], "trainer: 'hour'"),
    "time-based validation": (["--trainer.val_check_interval", "1h"], "val_check_interval"),
    "fraction without epochs": (
        ["--trainer.check_val_every_n_epoch", "null", "--trainer.val_check_interval", "0.5"],
        "check_val_every_n_epoch=None",
    ),
    "overfit_batches": (["--trainer.overfit_batches", "2.5"], "2.5 for overfit_batches"),
    "limit_train_batches": (["--trainer.limit_train_batches", "2.5"], "limit_train_batches"),
    "clip algorithm": (["--trainer.gradient_clip_algorithm", "max"], "gradient_clip_algorithm"),
    "transformer-engine": (["--trainer.precision", "transformer-engine"], "transformer_engine"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_refused_in_one_line(case: str, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    extra, expected = REFUSED[case]
    assert expected in refused_fit("digits_ncl", extra, tmp_path, capsys)


@pytest.mark.parametrize("duration", ["00:00:30:00", "{minutes: 30}"])
def test_a_duration_is_honoured(tmp_path: Path, duration: str) -> None:
    trainer = _fit(tmp_path, "--trainer.max_time", duration, "--trainer.max_steps", "1")
    timer = next(c for c in trainer.callbacks if type(c).__name__ == "Timer")
    assert timer._duration == 1800.0
    assert trainer.global_step == 1


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["16-true", "bf16-true", "64-true", "bf16-mixed", "32"])
@pytest.mark.parametrize("augment_on", ["device", "cpu"])
def test_every_cpu_precision_trains_with_both_pipelines(
    tmp_path: Path, precision: str, augment_on: str
) -> None:
    trainer = _fit(
        tmp_path, "--trainer.precision", precision, "--data.init_args.augment_on", augment_on,
        "--trainer.max_steps", "2", "--data.init_args.batch_size", "16",
    )  # fmt: skip
    assert trainer.global_step == 2
    assert trainer.precision == {"32": "32-true"}.get(precision, precision)
