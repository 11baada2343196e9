"""Issue 33, finding 7: every ``trainer`` value means what the user typed, or is refused
in one line before anything is written.

``limit_train_batches: 1`` is one batch per epoch and ``1.0`` every batch (Lightning's
two meanings), on the command line and in a config file; durations (``max_time``, a
time-based ``val_check_interval``) are ``DD:HH:MM:SS`` or a mapping, > 0; a precision
Lightning would change (``16-mixed`` on a CPU) or cannot build here
(``transformer-engine``) is refused; the true-precision settings train with both
augmentation pipelines (the device one converted its float32 views before: a dtype
error at the first batch).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ncl_lightning.runtime.cli import cli_main
from tests.helpers.cli import DEMO, refused_fit


def _fit(tmp: Path, *extra: str, config: str | None = None):
    out = tmp / "out"
    args = [
        "fit", "--config", str(DEMO / "digits_ncl.yaml"),
        *(["--config", config] if config else []),
        "--trainer.default_root_dir", str(out), "--trainer.logger.init_args.save_dir", str(out),
        "--trainer.enable_progress_bar", "false", "--trainer.num_sanity_val_steps", "0",
        "--trainer.limit_val_batches", "1", "--trainer.max_epochs", "1", *extra,
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
    trainer = _fit(tmp_path, config=str(config))
    assert trainer.num_training_batches == batches
    saved = next((tmp_path / "out").rglob("config.yaml")).read_text()
    assert f"limit_train_batches: {typed}\n" in saved  # the record keeps the type


def test_val_check_interval_int_and_float(tmp_path: Path) -> None:
    assert _fit(tmp_path / "a", "--trainer.val_check_interval", "1").val_check_batch == 1
    assert _fit(tmp_path / "b", "--trainer.val_check_interval", "1.0").val_check_batch == 11


REFUSED = {
    "max_time HH:MM:SS": (
        ["--trainer.max_time", "01:00:00"],
        "trainer.max_time must be a duration 'DD:HH:MM:SS' (e.g. 00:01:30:00 for 1.5 hours) "
        "or a mapping of weeks, days, hours, minutes, seconds, milliseconds, microseconds "
        "(e.g. {hours: 1, minutes: 30}), got '01:00:00'",
    ),
    "max_time unit": (["--trainer.max_time", "{hour: 1}"], "got {'hour': 1}"),
    "max_time zero": (
        ["--trainer.max_time", "00:00:00:00"],
        "trainer.max_time must be a duration > 0, got '00:00:00:00' (0 s): the run would "
        "stop before its first step",
    ),
    "max_time negative": (["--trainer.max_time", "{hours: -1}"], "(-3600 s)"),
    "time-based validation": (
        ["--trainer.val_check_interval", "1h"],
        "trainer.val_check_interval must be a duration 'DD:HH:MM:SS'",
    ),
    "fraction without epochs": (
        ["--trainer.check_val_every_n_epoch", "null", "--trainer.val_check_interval", "0.5"],
        "trainer.val_check_interval=0.5 is a float (a fraction of an epoch), but "
        "trainer.check_val_every_n_epoch is null",
    ),
    "overfit_batches": (
        ["--trainer.overfit_batches", "2.5"],
        "trainer.overfit_batches must be an integer >= 0 (a count) or a fraction in "
        "[0.0, 1.0], got 2.5",
    ),
    "clip algorithm": (
        ["--trainer.gradient_clip_algorithm", "max"],
        "trainer.gradient_clip_algorithm: 'max' is not valid; valid choices: 'norm', 'value'",
    ),
    "16-mixed on a CPU": (
        ["--trainer.precision", "16-mixed"],
        "trainer.precision: '16-mixed' (float16 mixed precision) does not run on a CPU "
        "(Lightning would train in bf16-mixed instead); set --trainer.precision bf16-mixed "
        "or 32-true, or train on a GPU",
    ),
    "16 on a CPU": (["--trainer.precision", "16"], "trainer.precision: 16 (float16 mixed"),
    "transformer-engine": (
        ["--trainer.precision", "transformer-engine"],
        "trainer.precision: 'transformer-engine' runs on NVIDIA GPUs only, and this run "
        "trains on cpu; set bf16-mixed or 32-true",
    ),
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
        "--trainer.max_steps", "2",
    )  # fmt: skip
    assert trainer.global_step == 2
    assert trainer.precision == {"32": "32-true"}.get(precision, precision)
