"""Runs never touch each other: a resume continues its own run or is refused, and
``--new_run`` starts a new one from a checkpoint's state (issue 33, findings 1, 2, 11, 12).

Real ``ncl-cli`` fits on the bundled digits, through ``main`` (the console entry point).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import torch
import yaml

from ncl_lightning.checkpoints.load import RECORD_KEY
from ncl_lightning.runtime import resume
from ncl_lightning.runtime.cli import cli_main
from ncl_lightning.runtime.resume import run_checkpoints, select_checkpoint
from tests.runtime.test_run_identity import _config, _refused


def _tree(root: Path) -> dict[str, str]:
    """Every file under ``root`` with a digest of its bytes."""
    return {
        str(p.relative_to(root)): hashlib.sha1(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _fit(config: Path, root: Path, *extra: str):
    return cli_main(["fit", "--config", str(config), "--trainer.default_root_dir", str(root),
                     "--trainer.logger.init_args.save_dir", str(root), *extra])  # fmt: skip


@pytest.mark.slow
def test_a_resume_into_another_runs_folder_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Finding 1: A's checkpoint resumed with root RB used to continue A inside C's
    ``version_0`` and replace C's ``metrics.csv``."""
    config = _config(tmp_path, tmp_path / "unused")
    ra, rb = tmp_path / "RA", tmp_path / "RB"
    _fit(config, rb)  # run C
    _fit(config, ra)  # run A
    a_last = ra / "digits" / "version_0" / "checkpoints" / "last.ckpt"
    record = torch.load(a_last, weights_only=True)[RECORD_KEY]["run"]
    assert record == {"id": "version_0", "folder": str((ra / "digits" / "version_0").resolve())}
    before_c, before_a = _tree(rb), _tree(ra)
    base = ["fit", "--config", str(config), "--trainer.default_root_dir", str(rb),
            "--trainer.logger.init_args.save_dir", str(rb), "--trainer.max_epochs", "2",
            "--ckpt_path", str(a_last)]  # fmt: skip
    line = _refused(base, capsys)
    assert line.startswith("ncl-cli: error: ckpt_path: ")
    assert "belongs to run version_0" in line and str(ra / "digits" / "version_0") in line
    assert str(rb / "digits" / "version_0") in line and "--new_run true" in line
    assert _tree(rb) == before_c and _tree(ra) == before_a  # nothing touched

    # --new_run: A's state continues in a new folder of RB; neither run is touched.
    cli = cli_main([*base, "--new_run", "true"])
    assert cli.trainer.current_epoch == 2 and cli.trainer.global_step > 2
    assert all(_tree(rb).get(k) == v for k, v in before_c.items())
    assert _tree(ra) == before_a
    new = rb / "digits" / "version_1"
    assert (new / "checkpoints" / "last.ckpt").is_file() and (new / "config.yaml").is_file()
    rows = (new / "metrics.csv").read_text()
    assert rows and not (new / "config.1.yaml").exists()
    # the same run, resumed in its own folder, is fine; a copy of its folder too
    cli_main(["fit", "--config", str(config), "--trainer.default_root_dir", str(ra),
              "--trainer.logger.init_args.save_dir", str(ra), "--trainer.max_epochs", "2",
              "--ckpt_path", "last"])  # fmt: skip
    assert (ra / "digits" / "version_0" / "config.1.yaml").is_file()


@pytest.mark.slow
def test_runs_of_two_experiments_with_one_id_stay_apart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Finding 2: ``--run_id seed0`` in loggers ``ncl_a`` and ``ncl_b`` of one root;
    resuming ``ncl_a`` with ``last`` used to take ``ncl_b``'s newer checkpoint."""
    root = tmp_path / "runs"
    config = _config(tmp_path, root)
    common = ["--run_id", "seed0"]
    _fit(config, root, *common, "--trainer.logger.init_args.name", "ncl_a")
    _fit(config, root, *common, "--trainer.logger.init_args.name", "ncl_b")
    a = root / "ncl_a" / "seed0"
    b_before = _tree(root / "ncl_b")
    cli = _fit(config, root, *common, "--trainer.logger.init_args.name", "ncl_a",
               "--trainer.max_epochs", "2", "--ckpt_path", "last")  # fmt: skip
    assert Path(cli.config["fit"]["ckpt_path"]) == a / "checkpoints" / "last.ckpt"
    assert (a / "config.1.yaml").is_file() and _tree(root / "ncl_b") == b_before
    # B's file given explicitly to A's run: refused, naming both folders
    line = _refused(["fit", "--config", str(config), "--trainer.default_root_dir", str(root),
                     "--trainer.logger.init_args.save_dir", str(root), *common,
                     "--trainer.logger.init_args.name", "ncl_a", "--trainer.max_epochs", "3",
                     "--ckpt_path", str(root / "ncl_b" / "seed0" / "checkpoints" / "last.ckpt")],
                    capsys)  # fmt: skip
    assert "belongs to run seed0" in line and str(root / "ncl_b" / "seed0") in line
    assert _tree(root / "ncl_b") == b_before


def _ckpt(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x")
    return path


def test_the_search_keeps_to_the_experiments_folder(tmp_path: Path) -> None:
    a = _ckpt(tmp_path / "ncl_a" / "seed0" / "checkpoints" / "last.ckpt")
    _ckpt(tmp_path / "ncl_b" / "seed0" / "checkpoints" / "last.ckpt")
    found = run_checkpoints([tmp_path])
    assert len(found) == 2
    assert select_checkpoint(found, "seed0", True, "x", homes=[tmp_path / "ncl_a"]) == a
    with pytest.raises(ValueError, match="2 runs named seed0 under x"):
        select_checkpoint(found, "seed0", True, "x")  # no way to tell them apart
    # a configured dirpath stays a candidate beside the loggers' folders
    d = _ckpt(tmp_path / "ckpts" / "last.ckpt")
    found = run_checkpoints([tmp_path, tmp_path / "ckpts"])
    homes, fixed = [tmp_path / "nowhere"], [tmp_path / "ckpts"]
    assert select_checkpoint(found, None, True, "x", homes=homes, fixed=fixed) == d


def test_the_search_is_bounded_and_says_so_in_one_short_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Finding 11: ``--auto_resume`` on a huge root scanned it without bound and printed a
    19,707-character line."""
    deep = _ckpt(tmp_path / "a" / "b" / "c" / "d" / "checkpoints" / "last.ckpt")  # too deep
    (tmp_path / "loop").symlink_to(tmp_path)  # never followed
    assert deep not in run_checkpoints([tmp_path]).values()
    for i in range(40):
        _ckpt(tmp_path / "exp" / f"version_{i}" / "checkpoints" / "last.ckpt")
    found = run_checkpoints([tmp_path])
    assert len(found) == 40
    with pytest.raises(ValueError, match="40 runs") as info:
        select_checkpoint(found, None, True, str(tmp_path))
    assert "and 35 more" in str(info.value) and len(str(info.value)) < 1000
    monkeypatch.setattr(resume, "SEARCH_ENTRIES", 50)
    with pytest.raises(ValueError, match=r"gave up after 50 entries"):
        run_checkpoints([tmp_path])


@pytest.mark.slow
def test_an_empty_ckpt_path_and_new_run_without_one_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Finding 12: ``--ckpt_path ''`` gave Lightning's traceback again."""
    root = tmp_path / "runs"
    config = str(_config(tmp_path, root))
    for extra, expected in (
        (["--ckpt_path", ""], "ncl-cli: error: ckpt_path: empty path"),
        (["--ckpt_path", " "], "ncl-cli: error: ckpt_path: empty path"),
        (["--new_run", "true"], "ncl-cli: error: new_run: starts a new fit"),
    ):
        line = _refused(["fit", "--config", config, *extra], capsys)
        assert line.startswith(expected), line
        assert not root.exists()
    cfg = yaml.safe_load(Path(config).read_text())
    assert cfg["trainer"]["default_root_dir"] == str(root)
