"""The atlas page: one self-contained ``index.html`` (template, CSS, scripts and data inline).

The template, the stylesheet and the scripts live in ``ncl_lightning/atlas/static/`` (package
data); [`render_page`][] fills the template's ``{{slot}}`` markers in one pass, so nothing
substituted is read again as a marker. The scripts run in one function scope, in the order
of [`SCRIPTS`][]; ``main.js`` documents the page's DOM contract and URL forms.
"""

from __future__ import annotations

import html
import re
from importlib import resources
from typing import Any

from ncl_lightning.atlas.schema import embed_json

SCRIPTS = ("util.js", "plots.js", "state.js", "cards.js", "main.js")
STYLESHEET = "atlas.css"
TEMPLATE = "page.html"
_SLOT = re.compile(r"\{\{(title|css|js|data)\}\}")


def static_text(name: str) -> str:
    """The text of one file of ``ncl_lightning/atlas/static/``."""
    return resources.files("ncl_lightning.atlas").joinpath("static", name).read_text("utf-8")


def page_script() -> str:
    """The page's scripts, concatenated in order inside one strict-mode function scope."""
    body = "\n".join(f"// ---- {name}\n{static_text(name)}" for name in SCRIPTS)
    return f'(function () {{\n"use strict";\n{body}\n}})();'


def render_page(atlas: dict[str, Any]) -> str:
    """The complete ``index.html`` of an atlas document (see [`ncl_lightning.atlas.schema`][]).

    Args:
        atlas: The document; its images are read by the page from ``img/`` beside
            ``index.html`` (or from ``images.inline``).

    Returns:
        The page's text: no network access, works from ``file://``.
    """
    slots = {
        "title": html.escape(str(atlas["title"])),
        "css": static_text(STYLESHEET),
        "js": page_script(),
        "data": embed_json(atlas),
    }
    return _SLOT.sub(lambda found: slots[found.group(1)], static_text(TEMPLATE))
