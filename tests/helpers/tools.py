"""Running a tool (``python -m ncl_lightning.atlas``, ``.plot``, ``.studies.*``) on bad input
in the tests: the contract every such case checks, as ``tests/helpers/cli.py`` does for
``ncl-cli``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pytest


def listing(folder: Path) -> list[str]:
    """Every path below ``folder`` (what a refused command must leave as it was)."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def refused(
    main: Callable[[Sequence[str]], object],
    argv: Sequence[str],
    prog: str,
    folder: Path,
    capsys: pytest.CaptureFixture,
) -> str:
    """Run ``main(argv)`` in-process; assert exit status 2, exactly one line on stderr
    (``<prog>: error: ...``), no traceback, nothing on stdout and nothing written under
    ``folder``; return the message after ``<prog>: error: ``."""
    before = listing(folder)
    with pytest.raises(SystemExit) as exit_info:
        main(list(argv))
    captured = capsys.readouterr()
    assert exit_info.value.code == 2, captured.err
    assert "Traceback" not in captured.err
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith(f"{prog}: error: "), lines[0]
    assert captured.out == ""
    assert listing(folder) == before
    return lines[0].removeprefix(f"{prog}: error: ")
