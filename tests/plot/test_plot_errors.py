"""``ncl_lightning.plot`` on bad input: one-line NCLErrors that name the path."""

from __future__ import annotations

import os
import shutil
import struct
import zlib
from pathlib import Path

import pytest

from ncl_lightning.foundation.errors import ConfigError, DataError, DataNotFoundError
from ncl_lightning.foundation.internals import WANDB_FILE_HEADER
from ncl_lightning.plot import find_metrics, load_runs, plot_curves, read_metrics
from ncl_lightning.plot.__main__ import PROG, default_out, main
from ncl_lightning.plot.curves import IMAGE_FORMATS
from tests.helpers.tools import refused

GOOD = "epoch,step,train/loss,val/online_acc\n0,0,2.0,\n0,0,,0.5\n"


def run_root(tmp_path: Path, *versions: str, text: str = GOOD, name: str = "digits") -> Path:
    """``<tmp>/run/<name>/version_N/metrics.csv`` for each version, holding ``text``."""
    for version in versions:
        folder = tmp_path / "run" / name / version
        folder.mkdir(parents=True)
        (folder / "metrics.csv").write_text(text)
    return tmp_path / "run"


def one_line(err: pytest.ExceptionInfo, path: Path) -> str:
    message = str(err.value)
    assert "\n" not in message and str(path) in message, message
    return message


def test_missing_folder_and_folder_without_csv(tmp_path: Path) -> None:
    with pytest.raises(DataNotFoundError) as err:
        find_metrics(tmp_path / "nope")
    one_line(err, tmp_path / "nope")
    (tmp_path / "empty" / "version_0").mkdir(parents=True)
    with pytest.raises(DataNotFoundError) as err:
        plot_curves([tmp_path / "empty"], tmp_path / "c.png")
    assert "or an offline W&B run" in one_line(err, tmp_path / "empty")
    assert not (tmp_path / "c.png").exists()


def test_several_versions_refused_unless_all(tmp_path: Path) -> None:
    root = run_root(tmp_path, "version_0", "version_1")
    with pytest.raises(ConfigError) as err:
        find_metrics(root)
    message = one_line(err, root)
    assert "digits/version_0" in message and "digits/version_1" in message and "--all" in message
    assert len(find_metrics(root, all_versions=True)) == 2
    labels = [r.label for r in load_runs([root], all_versions=True)]
    assert labels == ["digits/version_0", "digits/version_1"]  # made unique
    assert [r.label for r in load_runs([root / "digits" / "version_1"])] == ["digits"]


@pytest.mark.parametrize(
    ("content", "phrase"),
    [
        (b"", "empty file"),
        (b"\xff\xfe\x00garbage\n", "cannot read"),
        (b"epoch,loss\n0,1.0\n", "no 'step' column"),
        (b"epoch,step,train/loss\n0,0,1.0\n0,1\n", ":3: 2 cells for 3 columns"),
        (b"epoch,step,train/loss\n0,0,abc\n", ":2: column 'train/loss': 'abc' is not a number"),
    ],
)
def test_unreadable_csv(tmp_path: Path, content: bytes, phrase: str) -> None:
    path = tmp_path / "metrics.csv"
    path.write_bytes(content)
    with pytest.raises(DataError) as err:
        read_metrics(path)
    assert phrase in one_line(err, path)


def test_nothing_to_plot(tmp_path: Path) -> None:
    only_index = run_root(tmp_path / "a", "version_0", text="epoch,step,x\n0,0,\n")
    with pytest.raises(DataError, match="no metric logged") as err:
        plot_curves([only_index], tmp_path / "c.png")
    one_line(err, only_index)
    other = run_root(tmp_path / "b", "version_0", text="epoch,step,val/acc_top1\n0,0,0.5\n")
    with pytest.raises(DataError, match="none of the default metrics") as err:
        plot_curves([other], tmp_path / "c.png")
    assert "val/acc_top1" in one_line(err, other)  # the logged columns are listed
    plot_curves([other], tmp_path / "c.png", metrics=["val/acc_top1"])  # --metrics picks it
    assert (tmp_path / "c.png").is_file()


def test_unknown_metric_labels_and_x(tmp_path: Path) -> None:
    root = run_root(tmp_path, "version_0")
    with pytest.raises(ConfigError, match="did you mean 'val/online_acc'") as err:
        plot_curves([root], tmp_path / "c.png", metrics=["val/onlin_acc"])
    one_line(err, root)
    with pytest.raises(ConfigError, match="labels: 2 given for 1 runs"):
        plot_curves([root], tmp_path / "c.png", labels=["a", "b"])
    with pytest.raises(ConfigError, match="x must be one of"):
        plot_curves([root], tmp_path / "c.png", x="time")
    with pytest.raises(ConfigError, match="at least one"):
        load_runs([])
    no_epoch = run_root(tmp_path / "n", "version_0", text="step,train/loss\n0,1.0\n")
    with pytest.raises(DataError, match="no 'epoch' column"):
        plot_curves([no_epoch], tmp_path / "c.png", x="epoch")


def test_command_line_error_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    root = run_root(tmp_path, "version_0", "version_1")
    with pytest.raises(SystemExit) as exit_info:
        main([str(root)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("python -m ncl_lightning.plot: error: ")
    assert "Traceback" not in err and not (root / "curves.png").exists()


def test_default_output_next_to_the_runs(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    first = run_root(tmp_path / "demo" / "cl", "version_0", name="digits_cl")
    second = run_root(tmp_path / "demo" / "ncl", "version_0", name="digits_ncl")
    assert default_out([first]) == first / "curves.png"
    assert default_out([first, second]) == (tmp_path / "demo").resolve() / "curves.png"
    csv = first / "digits_cl" / "version_0" / "metrics.csv"
    assert default_out([csv]) == csv.parent / "curves.png"
    shutil.rmtree(second)
    main([str(first)])
    assert (first / "curves.png").is_file()
    assert "digits_cl" in capsys.readouterr().out


# -- every input through the command, before anything is written ----------------------------
def plot_refused(argv: list[str], folder: Path, capsys: pytest.CaptureFixture) -> str:
    return refused(main, argv, PROG, folder, capsys)


@pytest.mark.parametrize(
    ("out", "expected"),
    [
        ("curves.xyz", "--out: unknown image format '.xyz' of {tmp}/curves.xyz; valid: "),
        ("curves", "--out: {tmp}/curves has no file extension; give e.g. {tmp}/curves.png"),
        ("run", "--out: {tmp}/run is a folder; give the image file, e.g. {tmp}/run/curves.png"),
        ("afile/c.png", "--out: {tmp}/afile is a file, not a folder"),
        ("afile/sub/c.png", "--out: {tmp}/afile/sub: {tmp}/afile is a file, not a folder"),
    ],
)
def test_output_file_format_and_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture, out: str, expected: str
) -> None:
    root = run_root(tmp_path, "version_0")
    (tmp_path / "afile").write_text("not a folder")
    message = plot_refused([str(root), "--out", str(tmp_path / out)], tmp_path, capsys)
    assert message.startswith(expected.format(tmp=tmp_path)), message


def test_output_folder_that_cannot_be_made(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    if not Path("/proc").is_dir():
        pytest.skip("needs /proc, a folder no one can create entries in (even root)")
    root = run_root(tmp_path, "version_0")
    message = plot_refused([str(root), "--out", "/proc/ncl-plot/c.png"], tmp_path, capsys)
    assert message.startswith("--out: /proc/ncl-plot: cannot create folders in /proc")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes read-only files and folders")
def test_output_in_a_read_only_folder(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    root = run_root(tmp_path, "version_0")
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        message = plot_refused([str(root), "--out", str(locked / "c.png")], tmp_path, capsys)
    finally:
        locked.chmod(0o755)
    assert message.startswith(f"--out: {locked}: cannot create folders in {locked}")


def test_common_formats_are_written(tmp_path: Path) -> None:
    """Common formats --out accepts are written by matplotlib."""
    root = run_root(tmp_path, "version_0")
    for suffix in ("png", "pdf", "svg", "jpg"):
        assert suffix in IMAGE_FORMATS
        main([str(root), "--out", str(tmp_path / f"c.{suffix}")])
        assert (tmp_path / f"c.{suffix}").stat().st_size > 0


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--x", "time"], "--x: invalid choice: 'time' (choose from 'step', 'epoch')"),
        (["--metrics", "val/onlin_acc"], "did you mean 'val/online_acc'"),
        (["--labels", "a", "b"], "labels: 2 given for 1 runs"),
        (["--bogus"], "unrecognized arguments: --bogus"),
    ],
)
def test_bad_arguments(
    tmp_path: Path, capsys: pytest.CaptureFixture, args: list[str], expected: str
) -> None:
    root = run_root(tmp_path, "version_0")
    assert expected in plot_refused([str(root), *args], tmp_path, capsys)


def test_missing_run_and_default_output_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    assert plot_refused([str(tmp_path / "nope")], tmp_path, capsys) == (
        f"{tmp_path / 'nope'}: no such file or folder"
    )
    # the default output goes into the run folder; a file there is named, nothing written
    root = run_root(tmp_path, "version_0")
    (root / "curves.png").mkdir()
    message = plot_refused([str(root)], tmp_path, capsys)
    assert message.startswith(f"--out: {root / 'curves.png'} is a folder")


def test_a_wandb_record_that_does_not_decode_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """A whole chunk (its CRC holds) whose payload is no W&B record: named, exit 2."""
    payload = b"\xff" * 12
    crc = zlib.crc32(payload, zlib.crc32(bytes([1])))  # kind 1: a full record
    run = tmp_path / "run-x.wandb"
    run.write_bytes(WANDB_FILE_HEADER + struct.pack("<IHB", crc, len(payload), 1) + payload)
    with pytest.raises(SystemExit) as exit_info:
        main([str(run), "--out", str(tmp_path / "c.png")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert f"{run}: record 0 is not a W&B record" in err
    assert not (tmp_path / "c.png").exists()
