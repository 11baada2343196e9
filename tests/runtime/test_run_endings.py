"""How a run that stops while it works ends, through the real entry point.

* Its run folder deleted mid-run: one line naming the file, exit 1 (a fault, not bad input);
  a path refused in a DataModule's ``setup``, before any batch, stays bad input (exit 2).

A 2-process CPU DDP ``ncl-cli fit`` (Lightning's ``ddp`` launcher starts rank 1 as a child
of the command, gloo on loopback):

* SIGTERM to the launching process alone, or to the whole process group: both ranks stop at
  the same batch, ``last.ckpt`` is saved at that step, one line says so, exit 143.
* A corrupt image read by rank 0, or by rank 1: that rank's one line, plus (rank 1) one line
  from the launching process naming the rank; no traceback of the other rank's failed
  collective; the command exits 2 (bad input). Which rank reads the image is worked out here
  with ``DistributedSampler`` itself, as Lightning builds it (seed ``PL_GLOBAL_SEED``).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ncl_lightning.checkpoints.load import read_checkpoint
from ncl_lightning.data import DigitsDataModule
from ncl_lightning.data.seeding import EpochSampler
from ncl_lightning.runtime.cli import main
from tests.conftest import ROOT
from tests.helpers.cluster import free_port, launch_env
from tests.resume_helpers import output_of
from tests.runtime.test_signals import digits_config, start, wait_for

pytestmark = pytest.mark.slow
DDP = {"devices": 2, "strategy": "ddp"}
HINT = "set data.init_args.skip_corrupt: true to skip unreadable images"


def _start(config: dict, tmp: Path) -> subprocess.Popen:
    """``ncl-cli fit --config <config>`` in a session of its own (its process group)."""
    path = tmp / "run.yaml"
    path.write_text(yaml.safe_dump(config))
    return subprocess.Popen(
        [str(Path(sys.executable).parent / "ncl-cli"), "fit", "--config", str(path)],
        cwd=tmp, env=launch_env(MASTER_PORT=str(free_port()), NCL_STOP_GRACE_S="60"),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )  # fmt: skip


def test_a_run_folder_deleted_mid_run_is_a_fault(tmp_path: Path) -> None:
    run, marker = tmp_path / "run", tmp_path / "marker"
    proc = start(digits_config(run, str(marker), max_epochs=3), tmp_path / "run.yaml")
    wait_for(marker, proc)  # in the second epoch
    shutil.rmtree(run)
    out, _ = proc.communicate(timeout=300)
    errors = [line for line in out.splitlines() if "error" in line.lower()]
    assert len(errors) == 1, out[-3000:]
    assert errors[0].startswith(f"ncl-cli: error: {run}/digits/version_0/")
    assert errors[0].endswith("became unusable while it ran (deleted, moved or unmounted)")
    assert "Traceback" not in out
    assert proc.returncode == 1, out[-3000:]


@pytest.mark.ddp
@pytest.mark.parametrize("to", ["launcher", "group"])
def test_sigterm_saves_once_for_both_ranks(tmp_path: Path, to: str) -> None:
    run, marker = tmp_path / "run", tmp_path / "marker"
    config = digits_config(run, str(marker), max_epochs=4)
    config["trainer"] |= DDP
    proc = _start(config, tmp_path)
    wait_for(marker, proc)  # in the second epoch
    if to == "launcher":
        os.kill(proc.pid, signal.SIGTERM)
    else:
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        out, _ = proc.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the run did not stop: {output_of(proc)}")
    assert proc.returncode == 128 + signal.SIGTERM, out[-3000:]
    (last,) = run.glob("digits/version_0/checkpoints/last.ckpt")
    step = read_checkpoint(last)["global_step"]
    lines = [line for line in out.splitlines() if line.startswith("ncl-cli: stopped by")]
    assert lines == [lines[0]] and f"stopped by SIGTERM at step {step} " in lines[0], out[-3000:]
    assert f"saved {last};" in lines[0]
    assert "Traceback" not in out


def _images(root: Path, cifar_subset: Path) -> list[Path]:
    """2 classes x 40 training and 10 validation images of the real subset, in the
    dataset's order (classes, then file names, sorted)."""
    for split, n in (("train", 40), ("val", 10)):
        for name in ("airplane", "automobile"):
            (root / split / name).mkdir(parents=True)
            for image in sorted((cifar_subset / split / name).glob("*.png"))[:n]:
                shutil.copy2(image, root / split / name / image.name)
    return sorted((root / "train").glob("*/*.png"))


@pytest.mark.ddp
@pytest.mark.parametrize("bad_rank", [0, 1])
def test_a_bad_image_on_one_rank_is_one_line_and_exit_2(
    tmp_path: Path, cifar_subset: Path, bad_rank: int
) -> None:
    images = _images(tmp_path / "img", cifar_subset)
    seed = 0
    shard = EpochSampler(range(len(images)), lambda: seed, lambda: 0, 2, bad_rank)
    bad = images[shard.indices(seed, 0)[0]]  # the first image of that rank's first batch
    bad.write_bytes(bytes(range(256)) * 4)
    config = yaml.safe_load((ROOT / "configs/subset/cifar10_subset_ncl.yaml").read_text())
    config["seed_everything"] = seed
    config["trainer"] |= {
        **DDP, "max_epochs": 1, "enable_progress_bar": False, "enable_model_summary": False,
        "default_root_dir": str(tmp_path / "run"), "callbacks": [],
    }  # fmt: skip
    config["trainer"]["logger"]["init_args"]["save_dir"] = str(tmp_path / "run")
    config["data"]["init_args"] |= {
        "root": str(tmp_path / "img"), "num_workers": 0, "batch_size": 16,
    }  # fmt: skip
    proc = _start(config, tmp_path)
    try:
        out, _ = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the run did not stop: {output_of(proc)}")
    errors = [line for line in out.splitlines() if "error" in line.lower()]
    expected = [f"ncl-cli: error: cannot read image {bad}: cannot identify image file; {HINT}"]
    if bad_rank == 1:
        expected.append(
            "ncl-cli: error: rank 1 ended with exit status 2 (its error is above); the run stopped"
        )
    assert errors == expected, out[-3000:]
    assert "Traceback" not in out
    assert proc.returncode == 2, out[-3000:]


class UnreadableData(DigitsDataModule):
    """Digits whose ``setup`` meets a path it may not read, as a user's DataModule can."""

    def setup(self, stage: str) -> None:
        raise PermissionError(13, "Permission denied", "/data/private")


def test_a_path_refused_before_the_first_batch_is_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """An ``OSError`` in a DataModule's ``setup`` (before any batch) keeps status 2 and says
    nothing of a fault; only one raised once a batch began is a fault (test above)."""
    config = digits_config(tmp_path / "run")
    config["data"]["class_path"] = f"{__name__}.UnreadableData"
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", str(tmp_path / "run.yaml")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "ncl-cli: error: /data/private: Permission denied\n" in err, err
