"""Issue 17, findings 6 and 7 through ``ncl-cli``: bad Trainer arguments, output folders that
cannot be written, non-finite numbers, a batch the model cannot train on and broken
``--config`` files each exit 2 naming the key or the file, before anything is written: our
one ``ncl-cli: error:`` line, or the report of jsonargparse or Lightning.

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
from torch.utils.data import DataLoader

from ncl_lightning.foundation.errors import ConfigError, DataError
from ncl_lightning.runtime.cli import main
from ncl_lightning.runtime.errors import error_message
from tests.helpers.cli import DEMO, refused_fit

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


# (case id, config, extra arguments (a function of tmp_path), what stderr names; jsonargparse
#  reports a broken config file without its name: "error:" only)
CASES = [
    # -- Trainer: hardware --------------------------------------------------------------
    ("unknown accelerator", "digits_ncl", lambda t: ["--trainer.accelerator", "gpux"], "gpux"),
    ("devices -1 on cpu", "digits_ncl", lambda t: ["--trainer.devices", "-1"], "devices"),
    ("devices 0 on cpu", "digits_ncl", lambda t: ["--trainer.devices", "0"], "devices"),
    (
        "unknown strategy",
        "digits_ncl",
        lambda t: ["--trainer.strategy", "ddp_nonsense"],
        "ddp_nonsense",
    ),
    (
        "invalid precision",
        "digits_ncl",
        lambda t: ["--trainer.precision", "7"],
        "trainer.precision",
    ),
    # -- Trainer: numbers ----------------------------------------------------------------
    ("negative max_epochs", "digits_ncl", lambda t: ["--trainer.max_epochs", "-5"], "max_epochs"),
    (
        "val_check_interval above 1",
        "digits_ncl",
        lambda t: ["--trainer.val_check_interval", "2.5"],
        "val_check_interval",
    ),
    (
        "limit_train_batches above 1",
        "digits_ncl",
        lambda t: ["--trainer.limit_train_batches", "1.5"],
        "limit_train_batches",
    ),
    (
        "accumulate_grad_batches 0",
        "digits_ncl",
        lambda t: ["--trainer.accumulate_grad_batches", "0"],
        "accumulate_grad_batches",
    ),
    (
        "check_val_every_n_epoch 0",
        "digits_ncl",
        lambda t: ["--trainer.check_val_every_n_epoch", "0"],
        "check_val_every_n_epoch",
    ),
    (
        "negative gradient_clip_val",
        "digits_ncl",
        lambda t: ["--trainer.gradient_clip_val", "-1"],
        "gradient_clip_val",
    ),
    # -- Trainer: output folders --------------------------------------------------------
    (
        "default_root_dir is a file",
        "digits_ncl",
        lambda t: ["--trainer.default_root_dir", str(_file(t))],
        "afile",
    ),
    (
        "default_root_dir under a file",
        "digits_ncl",
        lambda t: ["--trainer.default_root_dir", str(_file(t) / "run")],
        "afile",
    ),
    # -- non-finite and out-of-range numbers ---------------------------------------------
    (
        "nan learning rate",
        "digits_ncl",
        lambda t: ["--model.init_args.optimizer.init_args.lr", "nan"],
        "lr",
    ),
    (
        "inf learning rate",
        "digits_ncl",
        lambda t: ["--model.init_args.optimizer.init_args.lr", "inf"],
        "lr",
    ),
    (
        "nan weight_decay",
        "digits_ncl",
        lambda t: ["--model.init_args.optimizer.init_args.weight_decay", "nan"],
        "weight_decay",
    ),
    (
        "negative momentum",
        "digits_ncl",
        lambda t: ["--model.init_args.optimizer.init_args.momentum", "-1"],
        "momentum",
    ),
    (
        "inf temperature",
        "digits_ncl",
        lambda t: ["--model.init_args.temperature", "inf"],
        "temperature",
    ),
    (
        "nan warmup_epochs",
        "digits_ncl",
        lambda t: ["--model.init_args.warmup_epochs", "nan"],
        "warmup_epochs",
    ),
    (
        "prior outside (0, 1)",
        "digits_bayesncl",
        lambda t: ["--model.init_args.prior", "1.5"],
        "model.init_args.prior must be in (0, 1)",
    ),
    (
        "negative kl_weight",
        "digits_bayesncl",
        lambda t: ["--model.init_args.kl_weight", "-1"],
        "model.init_args.kl_weight must be >= 0",
    ),
    (
        "nan val_fraction",
        "digits_ncl",
        lambda t: ["--data.init_args.val_fraction", "nan"],
        "val_fraction",
    ),
    (
        "negative num_workers",
        "digits_ncl",
        lambda t: ["--data.init_args.num_workers", "-1"],
        "num_workers",
    ),
    (
        "seed out of numpy's range",
        "digits_ncl",
        lambda t: ["--seed_everything", "-1"],
        "seed_everything",
    ),
    (
        "views the method does not train on",
        "digits_ncl",
        lambda t: ["--data.init_args.n_views", "1"],
        "data.init_args.n_views: NCL trains on 2 views per image, got 1",
    ),
    (
        "no epoch for the schedule",
        "digits_ncl",
        lambda t: ["--trainer.max_epochs", "0"],
        "the warmup-cosine schedule needs a finite run",
    ),
    # -- a batch the model cannot train on ------------------------------------------------
    # (the projector has BatchNorm only when asked: the releases' projector has none)
    (
        "batch of one with BatchNorm",
        "digits_ncl",
        lambda t: ["--data.init_args.batch_size", "1", "--model.init_args.proj_batch_norm", "true"],
        "batch_size=1 is too small for training",
    ),
    # -- config files --------------------------------------------------------------------
    (
        "YAML syntax error",
        "digits_ncl",
        lambda t: _yaml(t, "trainer:\n  max_epochs: [1\n"),
        "line 3, column 1",
    ),
    ("YAML tab", "digits_ncl", lambda t: _yaml(t, "trainer:\n\tmax_epochs: 1\n"), "error:"),
    ("empty config", "digits_ncl", lambda t: _yaml(t, ""), "error:"),
    ("config is a list", "digits_ncl", lambda t: _yaml(t, "- a\n- b\n"), "error:"),
    ("config is a folder", "digits_ncl", lambda t: ["--config", str(t)], "error:"),
    ("config missing", "digits_ncl", lambda t: ["--config", str(t / "nope.yaml")], "nope.yaml"),
    ("nested config syntax error", "digits_ncl", lambda t: _nested(t, "a: [\n"), "error:"),
    ("nested config missing", "digits_ncl", lambda t: _nested(t, None), "error:"),
]

GPU_CASES = [
    ("gpu on a machine with none", "digits_ncl", lambda t: ["--trainer.accelerator", "gpu"], 'gpu'),
    ("3 cuda devices on a machine with none", "digits_ncl",
     lambda t: ["--trainer.accelerator", "cuda", "--trainer.devices", "3"], 'CUDAAccelerator'),
]  # fmt: skip


def refused(config: str, extra: list[str], tmp: Path, capsys: pytest.CaptureFixture) -> str:
    """``ncl-cli fit --config configs/demo/<config>.yaml <extra>`` into ``tmp/out``: exit
    status 2, no traceback, nothing written; returns stderr (our one ``ncl-cli: error:``
    line, or jsonargparse's report)."""
    out = tmp / "out"
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", str(DEMO / f"{config}.yaml"), "--trainer.default_root_dir",
              str(out), "--trainer.logger.init_args.save_dir", str(out), *extra])  # fmt: skip
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "error:" in err, err
    ours = [line for line in err.splitlines() if line.startswith("ncl-cli: error:")]
    assert len(ours) <= 1, err
    assert not out.exists(), sorted(str(p) for p in out.rglob("*"))
    return err


@pytest.mark.parametrize(("config", "extra", "named"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])  # fmt: skip
def test_bad_input_exits_2_naming_the_culprit_before_anything_is_written(
    config: str, extra, named: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    err = refused(config, extra(tmp_path), tmp_path, capsys)
    assert named in err, f"{named!r} not in {err!r}"


@pytest.mark.skipif(not NO_GPU, reason="needs a machine without a GPU")
@pytest.mark.parametrize(("config", "extra", "named"), [c[1:] for c in GPU_CASES],
                         ids=[c[0] for c in GPU_CASES])  # fmt: skip
def test_missing_accelerator_is_one_line(
    config: str, extra, named: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    line = refused_fit(config, extra(tmp_path), tmp_path, capsys)
    assert named in line, line


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
    assert str(locked) in line and "Permission denied" in line
    assert not (locked / "run").exists()


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux /proc")
def test_output_folder_on_a_filesystem_that_refuses_it(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """/proc refuses new folders even to root: one line naming the path, nothing trained."""
    line = refused_fit("digits_ncl", ["--trainer.default_root_dir", "/proc/ncl-run"],
                       tmp_path, capsys)  # fmt: skip
    assert "/proc/ncl-run" in line


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
        (ConfigError("temperature must be > 0", key="temperature"), "temperature must be > 0"),
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
        "ours",
        "os-no-path",
        "key-error",
        "type-error",
    ],
)
def test_one_place_decides_user_error_or_bug(err: BaseException, expected: str | None) -> None:
    assert error_message(err) == expected


def test_our_error_wrapped_or_re_raised_from_a_worker_is_its_own_line() -> None:
    """jsonargparse raises a class's own error from its report; a DataLoader worker re-raises
    it with the worker's traceback as the message: the line is the error's own."""

    class Broken(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return 1

        def __getitem__(self, index: int) -> torch.Tensor:
            raise DataError("item 0 is broken")

    with pytest.raises(DataError) as info:
        next(iter(DataLoader(Broken(), num_workers=1)))
    assert error_message(info.value) == "item 0 is broken"
    try:
        try:
            raise ConfigError("batch_size must be >= 1", key="batch_size")
        except ConfigError as inner:
            raise ValueError("Does not validate against any of the Union subtypes") from inner
    except ValueError as wrapped:
        assert error_message(wrapped) == "batch_size must be >= 1"


@pytest.mark.slow
def test_process_exit_status_and_traceback_on_request(tmp_path: Path) -> None:
    """Through a real process: a YAML error names its line, exit 2 (jsonargparse's report);
    an error of ours is one line, and ``NCL_TRACEBACK=1`` shows its traceback instead."""
    bad = _file(tmp_path, "bad.yaml", "model:\n  init_args: {a: 1\n")
    cmd = [sys.executable, "-m", "ncl_lightning.runtime.cli", "fit", "--config", str(bad)]
    env = {k: v for k, v in os.environ.items() if k != "NCL_TRACEBACK"}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 2
    assert "line 3, column 1" in done.stderr and "Traceback" not in done.stderr, done.stderr
    demo = Path(__file__).resolve().parents[2] / "configs" / "demo" / "digits_ncl.yaml"
    cmd = [sys.executable, "-m", "ncl_lightning.runtime.cli", "fit", "--config", str(demo),
           "--model.init_args.temperature", "-1",
           "--trainer.default_root_dir", str(tmp_path / "runs")]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "model.init_args.temperature must be > 0" in done.stderr.strip().splitlines()[-1]
    traced = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                            env={**env, "NCL_TRACEBACK": "1"})  # fmt: skip
    assert traced.returncode != 0 and "Traceback" in traced.stderr
