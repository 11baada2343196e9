"""Load time of an atlas page in headless Chromium (Debian's, driven by playwright).

For each repeat a fresh tab opens ``index.html`` from disk and reports, in milliseconds from
the start of the navigation: the load event, and the moment the page's script has put the
first cards in the DOM (its ``performance.mark("atlas-first-cards")``). The JS heap in use
is read after a garbage collection, through the DevTools protocol. Medians are returned.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from ncl_lightning.atlas.browser import chromium
from ncl_lightning.foundation.errors import DataNotFoundError
from ncl_lightning.foundation.validation import check_at_least

FIRST_CARDS_MARK = "atlas-first-cards"
_TIMES = f"""() => {{
  const nav = performance.getEntriesByType("navigation")[0];
  const mark = performance.getEntriesByName("{FIRST_CARDS_MARK}")[0];
  return [nav.loadEventEnd, mark.startTime, document.querySelectorAll(".card").length];
}}"""


def page_load_ms(index_html: Path, repeats: int = 3) -> dict[str, float]:
    """Median page-load figures of an atlas page over ``repeats`` fresh tabs.

    Args:
        index_html: The atlas's ``index.html`` (its ``img/`` folder beside it).
        repeats: Tabs opened one after the other (at least 1).

    Returns:
        ``load_ms`` (load event), ``first_cards_ms`` (first cards rendered), ``js_heap_mb``
        (JS heap in use after a garbage collection), ``cards`` (cards in the DOM after load)
        and ``html_mb`` (size of ``index.html``).

    Raises:
        UsageError: playwright or Chromium is missing.
        DataNotFoundError: ``index_html`` does not exist.
    """
    check_at_least("repeats", repeats, 1)
    index_html = Path(index_html)
    if not index_html.is_file():
        raise DataNotFoundError(f"no atlas page at {index_html}")
    rows: list[tuple[float, float, float, float]] = []
    with chromium() as context:
        for _ in range(repeats):
            page = context.new_page()
            page.goto(index_html.resolve().as_uri(), wait_until="load")
            page.wait_for_function(
                f"performance.getEntriesByName('{FIRST_CARDS_MARK}').length > 0"
                " && performance.getEntriesByType('navigation')[0].loadEventEnd > 0"
            )
            load, first, cards = page.evaluate(_TIMES)
            cdp = context.new_cdp_session(page)
            cdp.send("HeapProfiler.collectGarbage")
            cdp.send("Performance.enable")
            metrics = {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}
            rows.append((load, first, metrics["JSHeapUsedSize"] / 2**20, cards))
            page.close()
    load, first, heap, cards = (statistics.median(column) for column in zip(*rows, strict=True))
    return {
        "load_ms": load,
        "first_cards_ms": first,
        "js_heap_mb": heap,
        "cards": cards,
        "html_mb": index_html.stat().st_size / 2**20,
    }
