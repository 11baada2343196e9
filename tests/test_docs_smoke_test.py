"""The two ``ncl-cli fit`` commands of ``docs/smoke-test.md`` run as written (placeholders
replaced by a generated ImageNet-like folder): the smoke check writes its run under
``runs/smoke``; the dry run (``--trainer.fast_dev_run 1``) writes nothing at all."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from ncl_lightning.runtime.cli import cli_main
from tests.conftest import ROOT
from tests.test_docs_own_data import folders  # noqa: F401  (the generated folders)

PAGE = ROOT / "docs" / "smoke-test.md"


def page_commands() -> list[list[str]]:
    """The page's ``ncl-cli fit`` commands as argument lists (after ``ncl-cli fit``)."""
    blocks = re.findall(r"```bash\n(.*?)```", PAGE.read_text(), flags=re.S)
    return [shlex.split(block.replace("\\\n", " "))[2:] for block in blocks]


def test_the_page_has_the_check_and_the_dry_run() -> None:
    check, dry = page_commands()
    assert "configs/overlays/smoke.yaml" in check and dry[: len(check)] == check
    assert dry[len(check) :] == ["--trainer.fast_dev_run", "1"]


@pytest.mark.slow
@pytest.mark.parametrize("index", [0, 1], ids=["smoke check", "dry run"])
def test_each_command_of_the_page_runs(
    index: int, folders: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch  # noqa: F811
) -> None:
    monkeypatch.chdir(tmp_path)  # the overlay's runs/smoke lands here
    args = [folders.get(a, a) for a in page_commands()[index]]
    args = [str(ROOT / a) if a.startswith("configs/") else a for a in args]
    cli = cli_main(["fit", *args, "--trainer.enable_progress_bar", "false"])
    assert cli.trainer.global_step >= 1 and cli.datamodule.num_classes == 3
    written = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*"))
    if index == 0:
        assert (tmp_path / "runs/smoke/smoke/version_0/checkpoints/last.ckpt").is_file()
        assert (tmp_path / "runs/smoke/smoke/version_0/metrics.csv").is_file()
    else:
        assert written == [], written
