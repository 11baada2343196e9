"""``python -m ncl_lightning.demo`` and ``python -m ncl_lightning.studies.chain`` check their
inputs as ``ncl-cli`` does: one line, exit status 2, nothing written (they gave tracebacks,
or exit 0 for an empty chain)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ncl_lightning import demo
from ncl_lightning.studies import chain
from tests.helpers.tools import refused

CASES = [
    (demo, ["--out", "{tmp}/afile"], "--out: {tmp}/afile is a file, not a folder"),
    (demo, ["--threads", "0"], "--threads must be >= 1, got 0"),
    (demo, ["--configs", "nonsense"], "no packaged config 'nonsense'"),
    (chain, [], "nothing to run: give --pretrain and/or --supervised configs"),
    (chain, ["--pretrain", "{tmp}/missing.yaml"], "{tmp}/missing.yaml: config file not found"),
    (chain, ["--pretrain", "demo/digits_cl", "--knn", "nonsense"], "no packaged config"),
    (
        chain,
        ["--pretrain", "demo/digits_cl", "--seeds", "0", "-1"],
        "--seeds must be an integer >= 0, got -1",
    ),
    (chain, ["--supervised", "demo/digits_ce", "--out", "{tmp}/afile"], "is a file, not a folder"),
]


@pytest.mark.parametrize(("tool", "argv", "expected"), CASES)
def test_a_tool_refuses_bad_input_in_one_line(
    tool, argv: list[str], expected: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    (tmp_path / "afile").write_text("not a folder")
    argv = [a.format(tmp=tmp_path) for a in argv]
    if "--out" not in argv:
        argv += ["--out", str(tmp_path / "out")]
    message = refused(tool.main, argv, tool.PROG, tmp_path, capsys)
    assert expected.format(tmp=tmp_path) in message, message
