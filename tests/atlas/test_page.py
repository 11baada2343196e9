"""The atlas page's text (no browser): the data round-trips, hostile strings stay inert, the
inlined scripts and styles cannot end their element and reach nothing off the page."""

from __future__ import annotations

import re

import pytest

from ncl_lightning.atlas.page import SCRIPTS, STYLESHEET, TEMPLATE, render_page, static_text
from ncl_lightning.atlas.schema import read_atlas
from tests.atlas.fake_atlas import FakeModel, fake_atlas

HOSTILE = '</script><b id="x">"&amp;<!--'


def test_render_page_embeds_the_document_read_atlas_returns() -> None:
    doc = fake_atlas(num_features=16)
    page = render_page(doc)
    assert read_atlas(page) == doc
    assert page.startswith("<!doctype html>") and "{{" not in page
    assert "<title>Fake atlas</title>" in page


@pytest.mark.parametrize("where", ["class", "title", "model", "note"])
def test_hostile_strings_cannot_end_the_data_script(where: str) -> None:
    models = (FakeModel("m0", HOSTILE if where == "model" else "CL"),)
    names = [HOSTILE, "{{css}}", "{{js}}"] if where == "class" else None
    title = HOSTILE if where == "title" else "t"
    doc = fake_atlas(num_features=8, models=models, class_names=names, title=title)
    if where == "note":
        doc["models"][0]["notes"] = [HOSTILE]
    page = render_page(doc)
    assert page.lower().count("</script>") == 2  # the data's and the scripts' own
    assert page.count("<!--") == 0
    assert read_atlas(page) == doc  # slots are filled once: "{{css}}" in the data stays
    if where == "title":
        assert "<title>&lt;/script&gt;&lt;b id=&quot;x&quot;&gt;" in page


def test_static_files_stay_small_inert_and_offline() -> None:
    for name in (*SCRIPTS, STYLESHEET, TEMPLATE):
        text = static_text(name)
        assert len(text.splitlines()) < 400, name
        assert not re.search(r"https?://(?!www\.w3\.org/2000/svg)", text), name
        assert not re.search(r"\bfetch\(|XMLHttpRequest|import\(|\beval\(|innerHTML", text), name
    for name in (*SCRIPTS, STYLESHEET):
        text = static_text(name).lower()
        assert "</script" not in text and "</style" not in text and "<!--" not in text, name


def test_every_id_of_the_dom_contract_exists() -> None:
    main = static_text("main.js")
    contract = main[: main.index("\nconst ")]
    ids = set(re.findall(r"#([a-z][a-z0-9-]*)", contract))
    assert {"sort", "class-filter", "min-freq", "jump", "cards", "dead-list", "detail"} <= ids
    template = static_text(TEMPLATE)
    scripts = "\n".join(static_text(name) for name in SCRIPTS)
    missing = [i for i in ids if f'id="{i}"' not in template and f'id: "{i}"' not in scripts]
    assert missing == []
