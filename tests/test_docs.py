"""`make docs`: the documentation site builds with ``mkdocs build --strict``.

Strict mode turns every warning into a failure: a link to a page or anchor that does not
exist, a page left out of the navigation, an API reference (``::: module``) or cross-reference
(``[name][ncl_lightning.x.Name]``) to an object that is gone, or a snippet include
(``--8<-- "examples/..."``) of a file that moved. So a stale page fails CI.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT

pytestmark = pytest.mark.slow
# The `site` fixture (the built site) is in conftest.py.


def nav_pages(nav: list) -> list[str]:
    pages = []
    for entry in nav:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        pages += nav_pages(value) if isinstance(value, list) else [value]
    return pages


def test_every_page_is_built_and_in_the_navigation(site: Path) -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    pages = nav_pages(config["nav"])
    on_disk = sorted(str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md"))
    assert sorted(pages) == on_disk
    for page in pages:
        assert (site / page.replace(".md", ".html")).is_file(), page


def test_extending_page_shows_the_example_code(site: Path) -> None:
    html = (site / "extending.html").read_text()
    text = re.sub(r"<[^>]+>", "", html)
    assert "class AlignUniformNCL(NCL)" in text
    assert "--8&lt;--" not in html and "--8<--" not in text


def test_api_reference_covers_every_subpackage(site: Path) -> None:
    """Each public subpackage has its page, and its exported classes, functions and registries
    are rendered (an export without a docstring would be silently left out)."""
    import importlib
    import inspect

    from ncl_lightning.foundation.registry import Registry

    documented = " ".join(p.read_text() for p in (ROOT / "docs" / "api").glob("*.md"))
    package = ROOT / "ncl_lightning"
    subpackages = sorted(p.parent.relative_to(ROOT) for p in package.glob("**/__init__.py"))
    for path in subpackages:
        module = ".".join(path.parts)
        if module in {"ncl_lightning", "ncl_lightning.bench", "ncl_lightning.studies"}:
            continue  # the top level re-exports; bench and studies are scripts with own pages
        assert f"::: {module}" in documented, f"docs/api has no page for {module}"
        # plot and atlas: no own page
        page = {"plot": "callbacks", "atlas": "callbacks"}.get(path.parts[1], path.parts[1])
        html = (site / "api" / f"{page}.html").read_text()
        imported = importlib.import_module(module)
        for name in getattr(imported, "__all__", []):
            obj = getattr(imported, name)
            if not (inspect.isclass(obj) or inspect.isfunction(obj) or isinstance(obj, Registry)):
                continue  # constants and type aliases
            # A function named like its own submodule (losses.info_nce.info_nce) is rendered
            # from the submodule, because the package attribute is the submodule to griffe.
            ids = (f'id="{module}.{name}"', f'id="{module}.{name}.{name}"')
            assert any(i in html for i in ids), f"{module}.{name} is not in the API reference"


def test_api_pages_render_cross_references(site: Path) -> None:
    """The docstrings' cross-references are links on the API pages (mkdocstrings' Markdown
    references), never a raw Sphinx role such as ``:class:`~ncl_lightning.methods.NCL```."""
    role = re.compile(r":(?:py:)?(?:class|func|meth|mod|data|attr|exc|obj):`")
    links = 0
    for page in sorted((site / "api").glob("*.html")):
        html = page.read_text()
        raw = role.findall(re.sub(r"<[^>]+>", "", html))
        assert not raw, f"{page.name}: {len(raw)} raw Sphinx roles, e.g. {raw[0]}"
        links += html.count("autorefs-internal")
    assert links >= 300, f"only {links} cross-reference links on the API pages"


def test_every_readme_image_is_in_the_repository() -> None:
    text = (ROOT / "README.md").read_text()
    images = re.findall(r"!\[[^\]]*\]\(\s*<?([^)\s>]+)", text)
    images += re.findall(r"<img\b[^>]*\bsrc=[\"']([^\"']+)", text, flags=re.I)
    assert images, "the README shows no image (update this test if that is intended)"
    remote = [src for src in images if re.match(r"[a-z]+:", src)]
    assert not remote, f"README images must be files of the repository: {remote}"
    missing = [src for src in images if not (ROOT / src.split("#")[0]).is_file()]
    assert not missing, f"README images not in the repository: {missing}"
