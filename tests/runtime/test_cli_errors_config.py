"""Issue 17, findings 6 and 7 through ``ncl-cli``: Trainer arguments Lightning would refuse
(or accept and fail on later), output folders that cannot be written, non-finite numbers,
a batch size the model cannot train on, and broken ``--config`` files are each one line
naming the key or the file (``file:line:column`` for YAML errors), exit status 2, before
anything is written.

Every case runs the real entry point (``ncl_lightning.runtime.cli.main``) on a demo config with one
thing wrong; the checks are those of ``tests/runtime/test_cli_errors.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from lightning.fabric.utilities.exceptions import MisconfigurationException

from ncl_lightning.runtime.cli_errors import user_error_message
from tests.helpers.cli import refused_fit

ROOT = Path(__file__).resolve().parents[2]
NO_GPU = not torch.cuda.is_available() and not torch.backends.mps.is_available()


def _file(tmp: Path, name: str = "afile", text: str = "x") -> Path:
    path = tmp / name
    path.write_text(text)
    return path


def _yaml(tmp: Path, text: str, name: str = "bad.yaml") -> list[str]:
    return ["--config", str(_file(tmp, name, text))]


def _nested(tmp: Path, inner: str | None) -> list[str]:
    if inner is not None:
        _file(tmp, "inner.yaml", inner)
    return _yaml(tmp, "config: inner.yaml\n", "outer.yaml")


# (case id, config, extra arguments (a function of tmp_path), substrings of the error line)
CASES = [
    # -- Trainer: hardware --------------------------------------------------------------
    ("unknown accelerator", "digits_ncl", lambda t: ["--trainer.accelerator", "gpux"],
     ["trainer.accelerator", "'gpux'", "did you mean 'gpu'?", "valid: auto, gpu"]),
    ("devices -1 on cpu", "digits_ncl", lambda t: ["--trainer.devices", "-1"],
     ["trainer.devices", "-1", "'cpu'", "number of processes >= 1"]),
    ("devices 0 on cpu", "digits_ncl", lambda t: ["--trainer.devices", "0"],
     ["trainer.devices", "0", "'cpu'"]),
    ("unknown strategy", "digits_ncl", lambda t: ["--trainer.strategy", "ddp_nonsense"],
     ["trainer.strategy", "'ddp_nonsense'", "valid: auto, ddp, ddp_spawn"]),
    ("invalid precision", "digits_ncl", lambda t: ["--trainer.precision", "7"],
     ["trainer.precision: '7' is not valid; valid choices: 64, 32, 16,", "'bf16-mixed'",
      "'16-mixed'", "'32-true'", "null"]),
    # -- Trainer: numbers ----------------------------------------------------------------
    ("negative max_epochs", "digits_ncl", lambda t: ["--trainer.max_epochs", "-5"],
     ["trainer.max_epochs", ">= -1", "-5"]),
    ("val_check_interval above 1", "digits_ncl", lambda t: ["--trainer.val_check_interval", "2.5"],
     ["trainer.val_check_interval", "(0.0, 1.0]", "2.5"]),
    ("limit_train_batches above 1", "digits_ncl",
     lambda t: ["--trainer.limit_train_batches", "1.5"], ["trainer.limit_train_batches", "1.5"]),
    ("accumulate_grad_batches 0", "digits_ncl",
     lambda t: ["--trainer.accumulate_grad_batches", "0"],
     ["trainer.accumulate_grad_batches", "0"]),
    ("check_val_every_n_epoch 0", "digits_ncl",
     lambda t: ["--trainer.check_val_every_n_epoch", "0"],
     ["trainer.check_val_every_n_epoch", "0"]),
    ("negative gradient_clip_val", "digits_ncl",
     lambda t: ["--trainer.gradient_clip_val", "-1"], ["trainer.gradient_clip_val", "-1"]),
    # -- Trainer: output folders --------------------------------------------------------
    ("default_root_dir is a file", "digits_ncl",
     lambda t: ["--trainer.default_root_dir", str(_file(t))],
     ["trainer.default_root_dir", "afile", "is a file, not a folder"]),
    ("default_root_dir under a file", "digits_ncl",
     lambda t: ["--trainer.default_root_dir", str(_file(t) / "run")],
     ["trainer.default_root_dir", "afile/run", "is a file, not a folder"]),
    ("logger save_dir is a file", "digits_ncl",
     lambda t: ["--trainer.logger.init_args.save_dir", str(_file(t))],
     ["trainer.logger.init_args.save_dir", "afile", "is a file, not a folder"]),
    # -- non-finite and out-of-range numbers ---------------------------------------------
    ("nan learning rate", "digits_ncl",
     lambda t: ["--model.init_args.optimizer.init_args.lr", "nan"],
     ["model.init_args.optimizer.init_args.lr must be a finite number", "'nan'"]),
    ("inf learning rate", "digits_ncl",
     lambda t: ["--model.init_args.optimizer.init_args.lr", "inf"],
     ["model.init_args.optimizer.init_args.lr must be a finite number", "'inf'"]),
    ("nan weight_decay", "digits_ncl",
     lambda t: ["--model.init_args.optimizer.init_args.weight_decay", "nan"],
     ["model.init_args.optimizer.init_args.weight_decay must be a finite number"]),
    ("negative momentum", "digits_ncl",
     lambda t: ["--model.init_args.optimizer.init_args.momentum", "-1"],
     ["momentum must be in [0, 1)", "-1.0"]),
    ("inf temperature", "digits_ncl", lambda t: ["--model.init_args.temperature", "inf"],
     ["model.init_args.temperature must be a finite number", "'inf'"]),
    ("nan warmup_epochs", "digits_ncl", lambda t: ["--model.init_args.warmup_epochs", "nan"],
     ["model.init_args.warmup_epochs must be a finite number"]),
    ("prior outside (0, 1)", "digits_bayesncl", lambda t: ["--model.init_args.prior", "1.5"],
     ["model.init_args.prior must be in (0, 1)", "1.5"]),
    ("negative kl_weight", "digits_bayesncl", lambda t: ["--model.init_args.kl_weight", "-1"],
     ["model.init_args.kl_weight must be >= 0", "-1"]),
    ("nan val_fraction", "digits_ncl", lambda t: ["--data.init_args.val_fraction", "nan"],
     ["data.init_args.val_fraction must be a finite number"]),
    ("negative num_workers", "digits_ncl", lambda t: ["--data.init_args.num_workers", "-1"],
     ["data.init_args.num_workers", "-1"]),
    ("seed out of numpy's range", "digits_ncl", lambda t: ["--seed_everything", "-1"],
     ["seed_everything must be true, false or an integer in [0, 4294967295]", "-1"]),
    ("views the method does not train on", "digits_ncl",
     lambda t: ["--data.init_args.n_views", "1"],
     ["data.init_args.n_views", "NCL trains on 2 views per image, got 1"]),
    ("no epoch for the schedule", "digits_ncl",
     lambda t: ["--trainer.max_epochs", "0"],
     ["the warmup-cosine schedule needs a finite run: set trainer.max_epochs >= 1 or "
      "trainer.max_steps >= 1 (got max_epochs=0, max_steps=-1)"]),
    # -- a batch the model cannot train on ------------------------------------------------
    # (the projector has BatchNorm only when asked: the releases' projector has none)
    ("batch of one with BatchNorm", "digits_ncl",
     lambda t: ["--data.init_args.batch_size", "1", "--model.init_args.proj_batch_norm", "true"],
     ["batch_size=1 is too small for training", "value per channel", "batch_size >= 2"]),
    # -- config files --------------------------------------------------------------------
    ("YAML syntax error", "digits_ncl", lambda t: _yaml(t, "trainer:\n  max_epochs: [1\n"),
     ["bad.yaml:3:1: YAML syntax error", "expected ',' or ']'"]),
    ("YAML tab", "digits_ncl", lambda t: _yaml(t, "trainer:\n\tmax_epochs: 1\n"),
     ["bad.yaml:2:1: YAML syntax error", "'\\t'"]),
    ("empty config", "digits_ncl", lambda t: _yaml(t, ""), ["bad.yaml", "config file is empty"]),
    ("config is a list", "digits_ncl", lambda t: _yaml(t, "- a\n- b\n"),
     ["bad.yaml", "holds a list at the top level; expected a mapping"]),
    ("config is a folder", "digits_ncl", lambda t: ["--config", str(t)],
     ["config path is a folder, not a file"]),
    ("config missing", "digits_ncl", lambda t: ["--config", str(t / "nope.yaml")],
     ["nope.yaml", "config file not found"]),
    ("nested config syntax error", "digits_ncl", lambda t: _nested(t, "a: [\n"),
     ["inner.yaml:2:1: YAML syntax error", "nested config: in", "outer.yaml"]),
    ("nested config missing", "digits_ncl", lambda t: _nested(t, None),
     ["inner.yaml: config file not found", "outer.yaml"]),
]  # fmt: skip

GPU_CASES = [
    ("gpu on a machine with none", "digits_ncl", lambda t: ["--trainer.accelerator", "gpu"],
     ["trainer.accelerator", "'gpu'", "not available on this machine", "available: cpu"]),
    ("3 cuda devices on a machine with none", "digits_ncl",
     lambda t: ["--trainer.accelerator", "cuda", "--trainer.devices", "3"],
     ["trainer.accelerator", "'cuda'", "not available"]),
]  # fmt: skip


@pytest.mark.parametrize(("config", "extra", "expected"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])  # fmt: skip
def test_bad_input_is_one_line_before_anything_is_written(
    config: str, extra, expected: list[str], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    line = refused_fit(config, extra(tmp_path), tmp_path, capsys)
    for part in expected:
        assert part in line, f"{part!r} not in {line!r}"


@pytest.mark.skipif(not NO_GPU, reason="needs a machine without a GPU")
@pytest.mark.parametrize(("config", "extra", "expected"), [c[1:] for c in GPU_CASES],
                         ids=[c[0] for c in GPU_CASES])  # fmt: skip
def test_missing_accelerator_is_one_line(
    config: str, extra, expected: list[str], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    line = refused_fit(config, extra(tmp_path), tmp_path, capsys)
    for part in expected:
        assert part in line, f"{part!r} not in {line!r}"


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write into a read-only folder")
def test_unwritable_output_folder_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        line = refused_fit("digits_ncl", ["--trainer.default_root_dir", str(locked / "run")],
                         tmp_path, capsys)  # fmt: skip
    finally:
        locked.chmod(0o755)
    assert "trainer.default_root_dir" in line and "cannot create folders in" in line
    assert not (locked / "run").exists()


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux /proc")
def test_output_folder_on_a_filesystem_that_refuses_it(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """/proc refuses new folders even to root: the probe finds it, not the first write."""
    line = refused_fit("digits_ncl", ["--trainer.logger.init_args.save_dir", "/proc/ncl-run"],
                     tmp_path, capsys)  # fmt: skip
    assert line.startswith("ncl-cli: error: trainer.logger.init_args.save_dir: /proc/ncl-run: ")
    assert "cannot create folders in /proc" in line


@pytest.mark.parametrize(
    ("err", "expected"),
    [
        (PermissionError(13, "Permission denied", "/data/x"), "/data/x: Permission denied"),
        (NotADirectoryError(20, "Not a directory", "/a/file/b"), "/a/file/b: Not a directory"),
        (FileExistsError(17, "File exists", "/runs/x"), "/runs/x: File exists"),
        (IsADirectoryError(21, "Is a directory", "/runs"), "/runs: Is a directory"),
        (
            MisconfigurationException("`max_epochs` must be a non-negative integer"),
            "`max_epochs` must be a non-negative integer",
        ),
        (OSError("no path"), None),  # an OS error naming no path: a bug, traceback kept
        (KeyError("x"), None),
        (TypeError("unsupported operand"), None),
    ],
    ids=[
        "permission",
        "not-a-dir",
        "exists",
        "is-a-dir",
        "misconfiguration",
        "os-no-path",
        "key-error",
        "type-error",
    ],
)
def test_one_place_decides_user_error_or_bug(err: BaseException, expected: str | None) -> None:
    assert user_error_message(err) == expected


@pytest.mark.slow
def test_process_exit_status_and_traceback_on_request(tmp_path: Path) -> None:
    """Through a real process: a YAML error is one line with its location and exit 2;
    ``NCL_TRACEBACK=1`` shows the traceback instead."""
    bad = _file(tmp_path, "bad.yaml", "model:\n  init_args: {a: 1\n")
    cmd = [sys.executable, "-m", "ncl_lightning.runtime.cli", "fit", "--config", str(bad)]
    env = {k: v for k, v in os.environ.items() if k != "NCL_TRACEBACK"}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"ncl-cli: error: {bad}:3:1: YAML syntax error: expected ',' or '}}', but got "
        "'<stream end>' (while parsing a flow mapping)"
    ]
    traced = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                            env={**env, "NCL_TRACEBACK": "1"})  # fmt: skip
    assert traced.returncode != 0 and "Traceback" in traced.stderr
