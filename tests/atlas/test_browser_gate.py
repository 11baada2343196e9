"""Without a browser the browser tests skip, except under ``CI=true`` where they fail."""

from __future__ import annotations

import importlib.util
import stat
from pathlib import Path

import pytest

from ncl_lightning.atlas import browser
from ncl_lightning.foundation.errors import UsageError
from tests.atlas.browser import require_browser


def test_missing_chromium_skips_or_fails_under_ci(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("NCL_CHROMIUM", str(tmp_path / "no-chromium"))
    assert "no Chromium at" in browser.browser_missing()
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="no Chromium at"):
        require_browser()
    monkeypatch.setenv("CI", "false")
    with pytest.raises(pytest.skip.Exception):
        require_browser()
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match=r"CI=true.*no Chromium at"):
        require_browser()
    with pytest.raises(UsageError, match="cannot start the browser"), browser.chromium():
        pass


def test_missing_playwright_is_named(monkeypatch, tmp_path: Path) -> None:
    exe = tmp_path / "chromium"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("NCL_CHROMIUM", str(exe))
    real = importlib.util.find_spec

    def find_spec(name: str, *args: object) -> object:
        return None if name == "playwright" else real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    assert "playwright" in browser.browser_missing()
    monkeypatch.setattr(importlib.util, "find_spec", real)
    if real("playwright") is not None:
        assert browser.browser_missing() is None
        monkeypatch.setenv("CI", "true")
        require_browser()  # neither skips nor fails
