"""The atlas page in headless Chromium, opened from disk: cards, sort, filters, jump, detail,
compare mode, URLs that survive reload and back/forward, no console output, no network.

Every check takes an atlas folder, so the same checks run on the fake atlas and on the demo's
real one (the ``demo_atlas`` fixture, a folder or its ``index.html``, when conftest has it).
Screenshots go to ``$NCL_ATLAS_SCREENSHOTS`` (else the test's tmp folder) as
``<atlas>-header.png`` (top of the page), ``<atlas>-browse.png`` (the cards),
``<atlas>-detail.png``, ``<atlas>-compare.png`` (tables, plots) and
``<atlas>-compare-cards.png``; ``<atlas>`` is ``fake`` or ``demo``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ncl_lightning.atlas.schema import read_atlas
from tests.atlas.browser import Watched, browser_context, file_url, open_page
from tests.atlas.fake_atlas import FakeModel, fake_atlas, write_fake_atlas

pytestmark = pytest.mark.slow
BATCH = 60  # cards the page renders at first
CARDS = "#cards .card"
# The first images a selector finds have loaded (before a screenshot).
LOADED = "s => [...document.querySelectorAll(s)].slice(0, 12).every(i => i.complete)"


@dataclass
class Atlas:
    name: str
    index: Path
    doc: dict[str, Any]


@pytest.fixture(scope="module")
def fake_atlas_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_fake_atlas(tmp_path_factory.mktemp("fake-atlas")).parent


@pytest.fixture(params=["fake_atlas_dir", "demo_atlas"])
def atlas(request: pytest.FixtureRequest) -> Atlas:
    try:
        found = Path(request.getfixturevalue(request.param))
    except pytest.FixtureLookupError:
        pytest.skip(f"no {request.param} fixture (yet)")
    index = found / "index.html" if found.is_dir() else found
    return Atlas(request.param.split("_")[0], index, read_atlas(index))


@pytest.fixture(scope="module")
def context() -> Iterator[Any]:
    with browser_context() as ctx:
        yield ctx


@pytest.fixture
def watched(context: Any) -> Iterator[Watched]:
    w = open_page(context)
    yield w
    w.page.close()
    assert w.problems() == []


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("NCL_ATLAS_SCREENSHOTS", tmp_path))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def expected(model: dict, sort: str = "ea", order: str | None = None, cls: int | None = None,
             min_freq: float = 0.0) -> list[int]:  # fmt: skip
    """The live dimensions the page should show, in order: a plain sort of the columns."""
    d = model["dims"]
    order = order or ("asc" if sort == "id" else "desc")
    live = [
        j for j in range(model["num_features"])
        if not d["dead"][j] and cls in (None, d["majority"][j]) and d["freq"][j] >= min_freq / 100
    ]  # fmt: skip
    if sort == "id":
        return sorted(live, reverse=order == "desc")
    sign = -1 if order == "desc" else 1
    return sorted(live, key=lambda j: (sign * d[sort][j], j))


def data_of(page: Any, selector: str, name: str) -> list[str]:
    """The ``data-<name>`` attribute of every element the selector finds, in order."""
    return page.eval_on_selector_all(selector, "(els, n) => els.map(e => e.dataset[n])", name)


def dims(page: Any, selector: str = CARDS) -> list[int]:
    return [int(j) for j in data_of(page, selector, "dim")]


def view(page: Any) -> str:
    return page.evaluate("document.documentElement.dataset.view")


def wait_view(page: Any, mode: str) -> None:
    """Until the page shows ``mode`` (a hash change is routed after the action returns)."""
    page.wait_for_function("m => document.documentElement.dataset.view === m", arg=mode)


def wait_hash(page: Any, fragment: str) -> None:
    """Until the URL is ``fragment`` and the page has drawn it (``html[data-routed]``)."""
    page.wait_for_function(
        "f => location.hash === f && document.documentElement.dataset.routed === f", arg=fragment
    )


def test_browse_shows_cards_header_and_dead_list(atlas: Atlas, watched: Watched, shots: Path):
    page = watched.page
    for i, model in enumerate(atlas.doc["models"]):
        page.goto(file_url(atlas.index, f"#/{model['key']}"))
        if i == 0:
            assert page.inner_text("#title") == atlas.doc["title"]
            assert page.get_attribute("#models a[aria-current=page]", "data-key") == "m0"
        live = expected(model)
        assert dims(page)[:BATCH] == live[:BATCH]
        assert page.get_attribute("#count", "data-shown") == str(len(live))
        dead = sum(model["dims"]["dead"])
        assert page.get_attribute("#dead-list", "data-count") == str(dead)
        assert page.locator("#notes .note").count() == len(model["notes"])
        assert data_of(page, "#metrics th[data-key]", "key") == [model["key"]]
        assert set(model["metrics"]) <= set(data_of(page, "#metrics tr[data-row]", "row"))
        for column in ("sepin", "gate"):
            disabled = page.locator(f"#sort option[value={column}]").is_disabled()
            assert disabled == (model["dims"][column] is None)
        if live:  # the strip of the first card loads from img/ and has one cell per image
            j = live[0]
            img = page.locator(f'{CARDS}[data-dim="{j}"] img')
            assert img.get_attribute("loading") == "lazy"
            img.scroll_into_view_if_needed()
            page.wait_for_function(
                "i => i.complete && i.naturalWidth > 0", arg=img.element_handle()
            )
            natural = img.evaluate("i => [i.naturalWidth, i.naturalHeight]")
            cells = len(model["dims"]["top"][j])
            assert natural == [cells * model["images"]["width"], model["images"]["height"]]
        if len(live) > BATCH:  # more cards when the end of the list scrolls into view
            page.locator(".sentinel").scroll_into_view_if_needed()
            page.wait_for_function(f"document.querySelectorAll('{CARDS}').length > {BATCH}")
            assert dims(page) == live[: len(dims(page))]
    page.goto(file_url(atlas.index))
    page.screenshot(path=str(shots / f"{atlas.name}-header.png"))
    page.evaluate("document.getElementById('controls').scrollIntoView()")
    page.wait_for_function(LOADED, arg="#cards .card img")
    page.screenshot(path=str(shots / f"{atlas.name}-browse.png"))


def test_sort_and_filters_follow_the_columns_and_the_url(atlas: Atlas, watched: Watched):
    page = watched.page
    for model in atlas.doc["models"]:
        page.goto(file_url(atlas.index, f"#/{model['key']}"))
        for sort in ("ea", "consistency", "freq", "sepin", "gate", "id"):
            if page.locator(f"#sort option[value={sort}]").is_disabled():
                continue
            page.select_option("#sort", sort)
            assert dims(page)[:20] == expected(model, sort)[:20], sort
        page.select_option("#sort", "consistency")
        page.select_option("#order", "asc")
        assert dims(page)[:20] == expected(model, "consistency", "asc")[:20]
        live = expected(model)
        if not live:
            continue
        cls = model["dims"]["majority"][live[0]]
        page.select_option("#class-filter", str(cls))
        want = expected(model, "consistency", "asc", cls)
        assert dims(page)[:BATCH] == want[:BATCH]
        assert {model["dims"]["majority"][j] for j in dims(page)} == {cls}
        page.select_option("#class-filter", "")
        freqs = sorted(model["dims"]["freq"][j] for j in live)
        threshold = round(100 * freqs[len(freqs) // 2], 3)
        page.fill("#min-freq", str(threshold))
        want = expected(model, "consistency", "asc", None, threshold)
        page.wait_for_function(f"document.getElementById('count').dataset.shown === '{len(want)}'")
        assert dims(page)[:BATCH] == want[:BATCH]
        assert all(model["dims"]["freq"][j] >= threshold / 100 for j in dims(page))
        fragment = f"#/{model['key']}?sort=consistency&order=asc&minfreq={threshold:g}"
        assert page.evaluate("location.hash") == fragment
        page.reload()  # sort and filters live in the URL
        assert page.input_value("#sort") == "consistency" and page.input_value("#order") == "asc"
        assert dims(page)[:BATCH] == want[:BATCH]


def test_jump_detail_prev_next_and_history(atlas: Atlas, watched: Watched, shots: Path):
    page = watched.page
    model = max(atlas.doc["models"], key=lambda m: sum(m["dims"]["dead"]))
    key, d = model["key"], model["dims"]
    order = expected(model)
    if len(order) < 6:
        pytest.skip(f"{model['name']} has fewer than 6 live dimensions")
    page.goto(file_url(atlas.index, f"#/{key}"))
    j = order[3]
    page.fill("#jump", str(j))
    page.press("#jump", "Enter")
    wait_hash(page, f"#/{key}/dim/{j}")
    assert view(page) == "detail" and page.get_attribute("#detail", "data-dim") == str(j)
    assert page.locator("#detail figure.cell").count() == len(d["top"][j])
    assert page.locator("#detail-hist rect").count() == model["num_classes"]
    values = page.locator("#detail figure.cell .val").all_inner_texts()
    assert [float(v) for v in values] == pytest.approx(d["top_values"][j], rel=1e-2)
    if "top_labels" in d:
        names = [model["class_names"][c] for c in d["top_labels"][j]]
        assert page.locator("#detail figure.cell .cls").all_inner_texts() == names
    page.wait_for_function(LOADED, arg="#detail img")
    page.screenshot(path=str(shots / f"{atlas.name}-detail.png"), full_page=True)
    page.click("#detail-next")
    wait_hash(page, f"#/{key}/dim/{order[4]}")
    page.go_back()
    wait_hash(page, f"#/{key}/dim/{j}")
    assert page.get_attribute("#detail", "data-dim") == str(j)
    page.go_forward()
    wait_hash(page, f"#/{key}/dim/{order[4]}")
    page.keyboard.press("ArrowLeft")
    wait_hash(page, f"#/{key}/dim/{j}")
    page.keyboard.press("Escape")
    wait_hash(page, f"#/{key}")
    assert view(page) == "browse"
    page.click(f'{CARDS}[data-dim="{order[5]}"]')  # a card opens its detail
    wait_hash(page, f"#/{key}/dim/{order[5]}")
    page.reload()
    assert view(page) == "detail" and page.get_attribute("#detail", "data-dim") == str(order[5])
    dead = [i for i, x in enumerate(d["dead"]) if x]
    if dead:  # a dead dimension's detail says so
        page.goto(file_url(atlas.index, f"#/{key}/dim/{dead[0]}"))
        assert "is dead" in page.inner_text("#detail .empty")
    page.fill("#jump", str(model["num_features"]))
    page.press("#jump", "Enter")
    assert page.inner_text("#jump-msg") != "" and view(page) == "detail"
    page.goto(file_url(atlas.index, "#/no-such-model/dim/1"))
    assert page.is_visible("#route-error") and view(page) == "browse"


def test_compare_mode_plots_lists_and_urls(atlas: Atlas, watched: Watched, shots: Path):
    page = watched.page
    models = atlas.doc["models"]
    if len(models) < 2:
        pytest.skip("compare mode needs two models")
    a, b = models[0], models[-1]
    page.goto(file_url(atlas.index))
    page.click("#compare-link")
    page.select_option("#compare-b", b["key"])
    wait_hash(page, f"#/compare/{a['key']}/{b['key']}")
    assert view(page) == "compare"
    assert page.locator("#plot-ea polyline.series").count() == 2
    assert page.locator("#plot-consistency rect.series").count() == 20
    assert data_of(page, "#metrics th[data-key]", "key") == [a["key"], b["key"]]
    assert dims(page, "#cards-a .card") == expected(a)[:BATCH]
    assert dims(page, "#cards-b .card") == expected(b)[:BATCH]
    page.select_option("#sort", "consistency")
    assert dims(page, "#cards-a .card") == expected(a, "consistency")[:BATCH]
    assert dims(page, "#cards-b .card") == expected(b, "consistency")[:BATCH]
    page.screenshot(path=str(shots / f"{atlas.name}-compare.png"))
    page.evaluate("document.getElementById('controls').scrollIntoView()")
    page.wait_for_function(LOADED, arg="#compare img")
    page.screenshot(path=str(shots / f"{atlas.name}-compare-cards.png"))
    fragment = f"#/compare/{a['key']}/{b['key']}?sort=consistency"
    assert page.evaluate("location.hash") == fragment
    page.reload()
    wait_hash(page, fragment)  # drawn again: a click before that can hit cards being replaced
    assert view(page) == "compare" and page.input_value("#compare-b") == b["key"]
    j = expected(b, "consistency")[0]
    page.click(f'#cards-b .card[data-dim="{j}"]')
    wait_view(page, "detail")  # the card's link routes on hashchange, after the click returns
    assert page.get_attribute("#detail", "data-model") == b["key"]
    page.click("#detail-back")  # back to compare mode, where the card was
    wait_hash(page, fragment)
    page.go_back()
    wait_view(page, "detail")
    page.go_back()
    wait_hash(page, fragment)
    page.goto(file_url(atlas.index, f"#/compare/{a['key']}/{models[1]['key']}"))
    page.go_back()
    wait_hash(page, fragment)


def test_pages_for_dead_models_one_class_and_hostile_names(tmp_path: Path, watched: Watched):
    hostile = '</script><b id="injected">x</b>'
    doc = fake_atlas(
        num_features=32,
        models=(FakeModel("m0", hostile, 1.0, notes=("all dimensions are dead",)),),
        class_names=[hostile],
        title=f"<i>{hostile}",
    )
    index = write_fake_atlas(tmp_path, doc)
    page = watched.page
    page.goto(file_url(index))
    assert page.inner_text("#title") == f"<i>{hostile}"
    assert page.locator("#injected").count() == 0
    assert page.inner_text("#notes .note") == f"{hostile}: all dimensions are dead"
    assert "every dimension is dead" in page.inner_text("#cards .empty")
    assert page.get_attribute("#dead-list", "data-count") == "32"
    assert page.locator("#compare-link").count() == 0
    page.goto(file_url(index, "#/compare/m0/m0"))
    assert "needs two models" in page.inner_text("#route-error")


def test_inline_images_need_no_files(tmp_path: Path, watched: Watched):
    index = write_fake_atlas(tmp_path, fake_atlas(num_features=16), inline=True)
    assert not (tmp_path / "img").exists()
    page = watched.page
    page.goto(file_url(index, "#/m0/dim/3"))
    page.wait_for_function(LOADED, arg="#detail img")
    widths = page.eval_on_selector_all("#detail img", "els => els.map(i => i.naturalWidth)")
    assert widths and all(w > 0 for w in widths)
