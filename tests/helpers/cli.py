"""Running ``ncl-cli`` on bad input in the tests: the contract every such case checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from ncl_lightning.runtime.cli import main
from tests.conftest import ROOT

DEMO = ROOT / "configs" / "demo"


def refused_fit(config: str, extra: list[str], tmp: Path, capsys: pytest.CaptureFixture) -> str:
    """Run ``ncl-cli fit --config configs/demo/<config>.yaml <extra>`` into ``tmp/out``;
    assert exit status 2, exactly one ``ncl-cli: error:`` line, no traceback and nothing
    written; return the error line."""
    out = tmp / "out"
    args = ["fit", "--config", str(DEMO / f"{config}.yaml"), "--trainer.default_root_dir",
            str(out), "--trainer.logger.init_args.save_dir", str(out), *extra]  # fmt: skip
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("ncl-cli: error:")]
    assert len(lines) == 1, err
    assert not out.exists(), sorted(str(p) for p in out.rglob("*"))
    return lines[0]
