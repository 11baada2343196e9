"""What ships (the package, its configs, the docs and examples) cites nothing a user lacks.

The team's design notes and the data folder beside the checkout exist only on the
development machines, so no shipped file may point at them.
"""

from __future__ import annotations

from tests.conftest import ROOT

SHIPPED = ("ncl_lightning", "configs", "docs", "examples")


def _citing(text: str) -> list[str]:
    """Every shipped text file (``path:line``) whose line contains ``text``."""
    hits = []
    for folder in SHIPPED:
        for path in sorted((ROOT / folder).rglob("*")):
            if not path.is_file() or path.is_symlink() or "__pycache__" in path.parts:
                continue
            try:
                lines = path.read_text(encoding="utf-8").splitlines()
            except UnicodeDecodeError:
                continue  # a picture or another binary file
            rel = path.relative_to(ROOT)
            hits += [f"{rel}:{i}" for i, line in enumerate(lines, 1) if text in line]
    return hits


def test_no_shipped_file_cites_the_design_notes() -> None:
    assert not _citing("DESIGN.md")


def test_no_shipped_file_points_beside_the_checkout() -> None:
    assert not _citing("../shared")
