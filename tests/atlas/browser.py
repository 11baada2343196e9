"""The browser tests' helpers: skip (or fail under ``CI=true``) without a browser, and a page
that records every console message, page error and request it makes."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ncl_lightning.atlas.browser import browser_missing, chromium


def require_browser() -> None:
    """Skip the calling test when the browser cannot run; fail instead under ``CI=true``,
    where every browser test must run."""
    reason = browser_missing()
    if reason is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true and the browser tests cannot run: {reason}")
    pytest.skip(reason)


@dataclass
class Watched:
    """A page and what it reported: console messages, uncaught errors, requests made."""

    page: Any
    console: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)

    def problems(self) -> list[str]:
        """Console output (any type), page errors and requests that left the disk."""
        remote = [url for url in self.requests if not url.startswith(("file:", "data:"))]
        return self.console + self.errors + [f"network request: {url}" for url in remote]


@contextmanager
def browser_context() -> Iterator[Any]:
    """A headless Chromium context (after :func:`require_browser`)."""
    require_browser()
    with chromium() as context:
        yield context


def open_page(context: Any) -> Watched:
    """A new page of ``context`` whose console, errors and requests are recorded."""
    page = context.new_page()
    watched = Watched(page)
    page.on("console", lambda message: watched.console.append(f"{message.type}: {message.text}"))
    page.on("pageerror", lambda error: watched.errors.append(f"page error: {error}"))
    page.on("request", lambda request: watched.requests.append(request.url))
    page.on("requestfailed", lambda request: _failed(watched, request))
    return watched


def _failed(watched: Watched, request: Any) -> None:
    """Record a failed request, but for ``net::ERR_ABORTED``: the page cancelled it (a lazy
    image whose card a re-render replaced, seen once in a full run), which is not a missing
    file (``ERR_FILE_NOT_FOUND``) or a page error."""
    if "ERR_ABORTED" not in str(request.failure):
        watched.errors.append(f"failed: {request.url} {request.failure}")


def file_url(index: Path, fragment: str = "") -> str:
    """The ``file://`` URL of an atlas page, with a ``#/...`` fragment."""
    return index.resolve().as_uri() + fragment
