"""Headless Chromium for the atlas page's tests and its load benchmark.

Debian's ``chromium`` package (``/usr/bin/chromium``, or ``$NCL_CHROMIUM``) driven by the
``playwright`` Python package (the ``dev`` extra); playwright's own browser downloads are
never used. Each launch gets a new, empty profile and no network-facing background work.
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ncl_lightning.foundation.errors import UsageError

DEFAULT_CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


def chromium_path() -> Path:
    """The Chromium executable: ``$NCL_CHROMIUM`` when set, else Debian's."""
    return Path(os.environ.get("NCL_CHROMIUM", DEFAULT_CHROMIUM))


def browser_missing() -> str | None:
    """Why the browser cannot run here (one line), or ``None`` when it can."""
    if importlib.util.find_spec("playwright") is None:
        return "the playwright package is not installed (pip install -e '.[dev]')"
    path = chromium_path()
    if not (path.is_file() and os.access(path, os.X_OK)):
        return f"no Chromium at {path} (apt-get install chromium, or set NCL_CHROMIUM)"
    return None


@contextmanager
def chromium() -> Iterator[Any]:
    """A headless Chromium browser context with a fresh profile (closed on exit).

    Raises:
        UsageError: playwright or Chromium is missing ([`browser_missing`][] says which).
    """
    reason = browser_missing()
    if reason is not None:
        raise UsageError(f"cannot start the browser: {reason}")
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="ncl-chromium-") as profile, sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            profile,
            executable_path=str(chromium_path()),
            headless=True,
            args=list(CHROMIUM_ARGS),
            viewport={"width": 1400, "height": 900},
        )
        try:
            yield context
        finally:
            context.close()
