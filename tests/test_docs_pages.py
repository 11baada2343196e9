"""The docs pages stay short and open with what the reader can do.

* every ``docs/*.md`` page (the API reference under ``docs/api/`` aside) opens, right after
  its ``# Title`` line, with one plain paragraph of at most 60 words: no list, table, code,
  admonition, image or heading first;
* the prose of ``docs/*.md`` (fenced code blocks and table rows not counted) is at most
  30,000 words in total;
* in headless Chromium, every page of the built site's navigation shows its first paragraph
  in the first 1280x800 viewport, every image on it has loaded, and nothing is logged to the
  console as an error;
* every image the README shows is a file of the repository.
"""

from __future__ import annotations

import functools
import http.server
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.atlas.browser import browser_context
from tests.conftest import ROOT
from tests.test_docs import nav_pages

DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md"))
MAX_OPENING_WORDS = 60
MAX_PROSE_WORDS = 30_000
VIEWPORT = {"width": 1280, "height": 800}
# A first line that makes the opening block something other than a plain paragraph.
NOT_PROSE = re.compile(r"(?:[-*+] |\d+[.)] |\||```|~~~|!!!|\?\?\?|#|>|<|!\[|\$\$|--8<--)")


def prose_words(text: str) -> int:
    """Words of a Markdown page outside fenced code blocks and table rows (the count of the
    docs diet: whitespace-separated tokens of every other line)."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("|")]
    return sum(len(line.split()) for line in lines)


def opening_block(text: str) -> list[str]:
    """The lines of the first block after the page's ``# Title`` line (up to a blank line).

    Raises:
        AssertionError: the page has no ``# Title`` line or nothing after it.
    """
    lines = text.splitlines()
    titles = [i for i, line in enumerate(lines) if line.startswith("# ")]
    assert titles, "no '# Title' line"
    rest = lines[titles[0] + 1 :]
    while rest and not rest[0].strip():
        rest = rest[1:]
    assert rest, "nothing after the title"
    block = []
    for line in rest:
        if not line.strip():
            break
        block.append(line)
    return block


def opening_problem(text: str) -> str | None:
    """Why the page's opening block is not a plain paragraph of at most 60 words, or None."""
    block = opening_block(text)
    first = block[0].lstrip()
    if NOT_PROSE.match(first):
        return f"opens with {first[:40]!r}, not a plain paragraph"
    inner = [line for line in block[1:] if re.match(r"\s*(?:[-*+] |\d+[.)] |\|)", line)]
    if inner:
        return f"opening paragraph runs into a list or table ({inner[0].strip()[:40]!r})"
    words = sum(len(line.split()) for line in block)
    if words > MAX_OPENING_WORDS:
        return f"opening paragraph has {words} words (at most {MAX_OPENING_WORDS})"
    return None


# -- the counting rules themselves ----------------------------------------------------------
def test_prose_words_skip_code_blocks_and_table_rows() -> None:
    page = "# T\n\none two three\n\n```bash\nnot these words\n```\n| a | b |\n|---|---|\nfour\n"
    assert prose_words(page) == 1 + 1 + 3 + 1  # '#', 'T', the three words, 'four'


@pytest.mark.parametrize(
    ("page", "problem"),
    [
        ("# T\n\nYou can do this. This page shows how.\n\n## A\n", None),
        ("# T\nYou can.\nSecond line.\n", None),
        ("# T\n\n- a list\n", "not a plain paragraph"),
        ("# T\n\n| a | b |\n", "not a plain paragraph"),
        ("# T\n\n```bash\nx\n```\n", "not a plain paragraph"),
        ("# T\n\n!!! note\n    x\n", "not a plain paragraph"),
        ("# T\n\n## Heading first\n", "not a plain paragraph"),
        ("# T\n\n![img](a.png)\n", "not a plain paragraph"),
        ("# T\n\nIntro:\n\n- a\n", None),
        ("# T\n\nIntro runs on:\n- a list\n", "runs into a list"),
        ("# T\n\n" + "word " * 61 + "\n", "61 words"),
        ("# T\n\n" + "word " * 60 + "\n", None),
    ],
)
def test_opening_problem_finds_each_kind(page: str, problem: str | None) -> None:
    found = opening_problem(page)
    if problem is None:
        assert found is None
    else:
        assert found is not None and problem in found


def test_a_page_without_a_title_is_refused() -> None:
    with pytest.raises(AssertionError, match="no '# Title' line"):
        opening_problem("Just text.\n")


# -- the pages -------------------------------------------------------------------------------
def test_the_pages_are_found() -> None:
    names = {p.name for p in PAGES}
    assert {"index.md", "quickstart.md", "python.md", "extending.md"} <= names
    assert not any(p.parent.name == "api" for p in PAGES)


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.name)
def test_each_page_opens_with_a_short_paragraph(path: Path) -> None:
    problem = opening_problem(path.read_text())
    assert problem is None, f"docs/{path.name}: {problem}"


def test_the_docs_prose_is_at_most_30k_words() -> None:
    counts = {p.name: prose_words(p.read_text()) for p in PAGES}
    total = sum(counts.values())
    largest = ", ".join(f"{n} {c}" for n, c in sorted(counts.items(), key=lambda x: -x[1])[:5])
    assert total <= MAX_PROSE_WORDS, f"{total} prose words in docs/*.md; largest: {largest}"


def readme_images() -> list[str]:
    """The targets of the README's Markdown images and ``<img src>`` tags."""
    text = (ROOT / "README.md").read_text()
    found = re.findall(r"!\[[^\]]*\]\(\s*<?([^)\s>]+)", text)
    found += re.findall(r"<img\b[^>]*\bsrc=[\"']([^\"']+)", text, flags=re.I)
    return found


def test_every_readme_image_is_in_the_repository() -> None:
    images = readme_images()
    assert images, "the README shows no image (update this test if that is intended)"
    remote = [src for src in images if re.match(r"[a-z]+:", src)]
    assert not remote, f"README images must be files of the repository: {remote}"
    missing = [src for src in images if not (ROOT / src.split("#")[0]).is_file()]
    assert not missing, f"README images not in the repository: {missing}"


# -- the built site in Chromium -------------------------------------------------------------
class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def served_site(site: Path) -> Iterator[str]:
    """The built site on a local HTTP server (as it is hosted: the search worker does not
    start from ``file://``); yields its base URL."""
    handler = functools.partial(_QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


NAV = ["index.md", *[p for p in nav_pages(yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"])
                      if p != "index.md"]]  # fmt: skip
# The first element after the page's title: the opening paragraph (for an API page, the
# module docstring's first paragraph, if any).
FIRST_PARAGRAPH = "article.md-content__inner > h1 ~ p"
IMAGES_LOADED = "() => [...document.images].filter(i => !(i.complete && i.naturalWidth > 0))" \
    ".map(i => i.getAttribute('src'))"  # fmt: skip


@pytest.fixture(scope="module")
def docs_browser() -> Iterator[Any]:
    with browser_context() as context:
        # Off-machine requests (the theme's web fonts) get an empty answer: the test needs
        # no network and judges the site's own files.
        context.route(
            re.compile(r"^(?!http://127\.0\.0\.1[:/]).*"),
            lambda route: route.fulfill(status=200, body=""),
        )
        yield context


@pytest.mark.slow
@pytest.mark.parametrize("page_md", NAV)
def test_each_page_shows_its_opening_and_images_without_errors(
    docs_browser: Any, served_site: str, page_md: str
) -> None:
    page = docs_browser.new_page()
    errors: list[str] = []
    page.on("console", lambda m: m.type == "error" and errors.append(f"console: {m.text}"))
    page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
    page.on("requestfailed", lambda r: errors.append(f"failed: {r.url} {r.failure}"))
    try:
        page.set_viewport_size(VIEWPORT)
        response = page.goto(served_site + page_md.replace(".md", ".html"), wait_until="load")
        assert response is not None and response.ok, f"{page_md}: {response and response.status}"
        # Images below the fold may load lazily: bring each into view, then wait for all.
        page.evaluate("() => document.querySelectorAll('img').forEach(i => i.loading = 'eager')")
        page.wait_for_function(
            "() => [...document.images].every(i => i.complete)", timeout=15_000
        )
        broken = page.evaluate(IMAGES_LOADED)
        assert not broken, f"{page_md}: images that did not load: {broken}"
        page.evaluate("() => window.scrollTo(0, 0)")
        if not page_md.startswith("api/"):
            first = page.locator(FIRST_PARAGRAPH).first
            assert first.count() == 1, f"{page_md}: no paragraph after the title"
            box = first.bounding_box()
            assert box is not None, f"{page_md}: the first paragraph is not rendered"
            assert box["y"] >= 0 and box["y"] + box["height"] <= VIEWPORT["height"], (
                f"{page_md}: the first paragraph spans y={box['y']:.0f}..."
                f"{box['y'] + box['height']:.0f}, not within the first {VIEWPORT['height']} px"
            )
            assert first.is_visible()
        page.wait_for_timeout(200)  # late console errors (the search worker)
        assert not errors, f"{page_md}:\n" + "\n".join(errors)
    finally:
        page.close()
