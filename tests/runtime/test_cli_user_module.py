"""``ncl-cli`` (the console script, not ``python -m``) imports a user's module from the
folder it runs in, as ``python -m`` would (issue 47)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from tests.conftest import ROOT

USER_METHOD = """
    from ncl_lightning.methods import NCL


    class MyNCL(NCL):
        \"\"\"NCL under the user's own name.\"\"\"
"""


@pytest.mark.slow
def test_the_console_script_imports_a_module_of_the_current_folder(tmp_path: Path) -> None:
    script = Path(sys.executable).with_name("ncl-cli")
    assert script.is_file(), f"the console script is not installed beside {sys.executable}"
    (tmp_path / "mymethods.py").write_text(textwrap.dedent(USER_METHOD))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    runs = tmp_path / "runs"
    done = subprocess.run(
        [str(script), "fit", "--config", str(ROOT / "configs/demo/digits_ncl.yaml"),
         "--model", "mymethods.MyNCL", "--trainer.max_epochs", "1",
         "--trainer.limit_train_batches", "2", "--trainer.enable_progress_bar", "false",
         "--trainer.default_root_dir", str(runs),
         "--trainer.logger.init_args.save_dir", str(runs)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    (ckpt,) = runs.glob("*/version_0/checkpoints/last.ckpt")
    hparams = torch.load(ckpt, map_location="cpu", weights_only=False)["hyper_parameters"]
    assert hparams["_class_path"] == "mymethods.MyNCL"
