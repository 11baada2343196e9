"""The README's demo picture caption states the figures of the README's demo table.

The table is ``make demo``'s (``runs/demo/results.md``); its majority-share column is the
mean, over the picture's rows, of each row's majority-class share, as ``TopActivations``
logged it. ``ncl_lightning.demo.caption`` regenerates the caption's figures from the table,
so a re-run demo pasted into the README without its caption (or the reverse) fails here.
"""

from __future__ import annotations

from ncl_lightning.demo import caption
from tests.conftest import ROOT

PICTURE = "docs/images/demo_top_activations.png"


def picture_caption(text: str) -> str:
    """The italic paragraph right under the demo picture, whitespace-normalised."""
    lines = text.splitlines()
    (at,) = [i for i, line in enumerate(lines) if line.startswith("![") and PICTURE in line]
    paragraph: list[str] = []
    for line in lines[at + 1 :]:
        if line.strip():
            paragraph.append(line)
        elif paragraph:
            break
    joined = " ".join(" ".join(paragraph).split())
    assert joined.startswith("*") and joined.endswith("*"), f"no italic caption: {joined!r}"
    return joined


def test_readme_caption_has_the_figures_of_the_readme_demo_table() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    figures = caption(readme)
    print(f"README table: {figures}")
    assert figures in picture_caption(readme)
