"""The atlas page-load benchmark: figures of a real load, clear errors without a page."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.atlas_page import page_load_ms
from ncl_lightning.foundation.errors import ConfigError, DataNotFoundError
from tests.atlas.browser import require_browser
from tests.atlas.fake_atlas import write_fake_atlas


def test_bad_calls_are_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="repeats"):
        page_load_ms(tmp_path / "index.html", repeats=0)
    with pytest.raises(DataNotFoundError, match="no atlas page"):
        page_load_ms(tmp_path / "index.html")


@pytest.mark.slow
def test_page_load_reports_load_first_cards_and_heap(tmp_path: Path) -> None:
    require_browser()
    figures = page_load_ms(write_fake_atlas(tmp_path), repeats=1)
    assert set(figures) == {"load_ms", "first_cards_ms", "js_heap_mb", "cards", "html_mb"}
    assert figures["first_cards_ms"] > 0 and figures["load_ms"] > 0
    assert 0 < figures["js_heap_mb"] < 1000 and figures["cards"] == 60
