"""Why a download failed, in words a user can act on.

``torchvision``'s downloads surface a failure as whatever ``urllib`` raised (often a
``URLError`` wrapping the socket error, sometimes re-raised after an https -> http
retry). [`download_failure_cause`][] walks that chain and names the true cause: no
network / DNS failure, host or network unreachable, connection refused or reset, a
time-out, an HTTP error status, or a downloaded file that failed its check.
"""

from __future__ import annotations

import errno
import socket
import ssl
from urllib.error import HTTPError, URLError
from urllib.parse import urlparse

_UNREACHABLE = {errno.ENETUNREACH, errno.EHOSTUNREACH, errno.ENETDOWN, errno.EHOSTDOWN}


def _chain(err: BaseException) -> list[BaseException]:
    """``err``, the errors it wraps (``URLError.reason``, ``__cause__``, ``__context__``)."""
    seen: list[BaseException] = []
    todo: list[BaseException | None] = [err]
    while todo:
        current = todo.pop(0)
        if current is None or any(current is s for s in seen):
            continue
        seen.append(current)
        reason = getattr(current, "reason", None) if isinstance(current, URLError) else None
        todo += [reason if isinstance(reason, BaseException) else None]
        todo += [current.__cause__, current.__context__]
    return seen


def _describe(err: BaseException, host: str) -> str | None:
    """The cause one error in the chain names, or ``None`` when it names none."""
    detail = " ".join(str(err).split())
    if isinstance(err, HTTPError):
        return f"the server {host} answered HTTP {err.code} {err.reason}"
    if isinstance(err, socket.gaierror):
        return f"DNS lookup of {host} failed: no network, or no DNS ({detail})"
    if isinstance(err, TimeoutError | socket.timeout):
        return f"the connection to {host} timed out (no network or a slow one)"
    if isinstance(err, ConnectionRefusedError):
        return f"{host} refused the connection (a proxy or firewall?)"
    if isinstance(err, ConnectionError):
        return f"the connection to {host} failed: {detail}"
    if isinstance(err, ssl.SSLError):
        return f"the TLS handshake with {host} failed: {detail}"
    if isinstance(err, OSError) and err.errno in _UNREACHABLE:
        return f"network or host {host} unreachable ({detail})"
    return None


def download_failure_cause(err: BaseException, url: str) -> str:
    """One line naming why downloading ``url`` raised ``err``.

    Args:
        err: What the download raised (``URLError``, ``socket.gaierror``,
            ``ConnectionError``, ``TimeoutError``, ``HTTPError``, torchvision's
            ``RuntimeError`` for a file failing its md5 check, ...).
        url: The address that was being downloaded.

    Returns:
        E.g. ``"DNS lookup of www.cs.toronto.edu failed: no network, or no DNS (...)"``.
    """
    host = urlparse(url).netloc or url
    for link in _chain(err):
        cause = _describe(link, host)
        if cause is not None:
            return cause
    detail = " ".join(str(err).split())
    if isinstance(err, URLError):
        return f"cannot reach {host}: {detail}"
    if isinstance(err, RuntimeError):
        return f"the file downloaded from {host} failed its check: {detail}"
    return f"{type(err).__name__}: {detail}"
