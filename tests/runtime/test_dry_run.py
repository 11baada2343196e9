"""``--trainer.fast_dev_run``, Lightning's dry run, writes nothing into the run root
(issue 47): no ``last.ckpt`` (Lightning's ModelCheckpoint saves it at the end of training
even then) and no pictures, which are still drawn (into a scratch folder)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ncl_lightning.callbacks import TopActivations
from ncl_lightning.runtime.cli import cli_main
from tests.conftest import ROOT


@pytest.mark.slow
def test_fast_dev_run_writes_nothing_into_the_run_root(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    cli = cli_main([
        "fit", "--config", str(ROOT / "configs/demo/digits_ncl.yaml"),
        "--trainer.fast_dev_run", "2", "--trainer.enable_progress_bar", "false",
        "--trainer.default_root_dir", str(root), "--trainer.logger.init_args.save_dir", str(root),
    ])  # fmt: skip
    assert cli.trainer.global_step == 2
    written = sorted(str(p) for p in root.rglob("*")) if root.exists() else []
    assert written == []
    (pictures,) = [c for c in cli.trainer.callbacks if isinstance(c, TopActivations)]
    assert pictures.last_rows["val"]  # drawn all the same: the dry run ran the code
