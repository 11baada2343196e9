"""One way to write a file that a later run reads back: beside its target, checked for
room, never half-written.

Checkpoints ([`ncl_lightning.checkpoints.io`][]) and the decoded-image disk cache
([`ncl_lightning.data.memory.decode_images`][]) are written by [`atomic_write`][]: into a
temporary file in the target's folder, synced, then renamed over the target (``os.replace``:
a reader sees the old complete file or the new one). A full disk, a quota or a file-size
limit (``ENOSPC``, ``EDQUOT``, ``EFBIG``) met at any point raises one
[`DiskFullError`][ncl_lightning.foundation.errors.DiskFullError] naming the path and the space
it needs against the space free, and leaves the target as it was. Data goes through
``write(2)``, never into a memory map of a sparse file (whose page faults on a full disk kill
the process with SIGBUS). A killed writer's temporary file is deleted by [`remove_stale`][]
when the next writer starts in that folder.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import re
import shutil
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from ncl_lightning.foundation.errors import DiskFullError

#: errno -> (what the user is told, the first thing to try; the hint says where else to write).
DISK_FULL = {
    errno.ENOSPC: ("no space left on the device", "free space there"),
    errno.EDQUOT: ("disk quota exceeded", "free space within your quota"),
    errno.EFBIG: (
        "file too large for this process or file system",
        "raise the file size limit (`ulimit -f`)",
    ),
}
#: A temporary file of another host is stale once unmodified this long (its writer,
#: alive, would be adding to it).
STALE_AFTER_S = 3600.0
BUFFER_SIZE = 1 << 20
TMP_MARK = ".tmp-"
#: Temporary files of [`atomic_write`][] (default names).
TMP_PATTERN = re.compile(r"^\..+\.tmp-(?P<pid>\d+)$")
_UNITS = ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB")


def format_bytes(n: int) -> str:
    """``n`` bytes in binary units: ``"512 bytes"``, ``"1.5 MiB"``."""
    value, unit = float(n), 0
    while value >= 1024 and unit < len(_UNITS) - 1:
        value, unit = value / 1024, unit + 1
    return f"{int(value)} bytes" if unit == 0 else f"{value:.1f} {_UNITS[unit]}"


def host_tag() -> str:
    """This host's name as it goes into temporary file names (``[A-Za-z0-9-]``)."""
    return re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname().split(".")[0]) or "host"


def free_bytes(folder: str | Path) -> int | None:
    """Bytes free to this user in ``folder``'s file system; ``None`` when unknown."""
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return None


def disk_full_error(
    path: str | Path,
    code: int,
    needed: int | None,
    *,
    estimate: bool = False,
    lower_bound: bool = False,
    hint: str = "",
) -> DiskFullError:
    """The [`DiskFullError`][] for ``path`` that could not be written.

    Args:
        path: The target file.
        code: ``errno.ENOSPC``, ``EDQUOT`` or ``EFBIG``.
        needed: Bytes the file needs, when known.
        estimate: ``needed`` is an estimate ("about").
        lower_bound: ``needed`` is what was written before the error ("more than").
        hint: Where else to write, e.g. which setting moves the file to another disk.
    """
    path = Path(path)
    free = free_bytes(path.parent)
    parts = []
    if needed:
        qualifier = "more than " if lower_bound else "about " if estimate else ""
        parts.append(f"it needs {qualifier}{format_bytes(needed)}")
    if free is not None:
        parts.append(f"{format_bytes(free)} free in {path.parent}")
    detail = f" ({', '.join(parts)})" if parts else ""
    reason, remedy = DISK_FULL[code]
    todo = f"{remedy}, or {hint or 'write elsewhere'}"
    kept = f"the previous {path.name} is kept" if path.exists() else "nothing was written"
    message = f"cannot write {path}: {reason}{detail}; {todo}; {kept}"
    err = DiskFullError(message, path=str(path), needed=needed, free=free)
    err.errno = code
    return err


def disk_full_errno(err: BaseException | None) -> int | None:
    """The errno of the first ``ENOSPC``/``EDQUOT``/``EFBIG`` ``OSError`` in ``err``, its
    cause or its context (``torch.save`` reports a failed write as a ``RuntimeError``
    raised while handling the ``OSError``); ``None`` when there is none."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        full = isinstance(err, OSError) and err.errno in DISK_FULL
        if full and not isinstance(err, DiskFullError):
            return err.errno
        err = err.__cause__ or err.__context__
    return None


class _Sink(io.RawIOBase):
    """Raw writes to a file descriptor (``os.write``), counting the bytes and keeping the
    first disk-full error (a caller such as ``torch.save`` may report it as another)."""

    def __init__(self, fd: int) -> None:
        super().__init__()
        self.fd, self.written, self.error = fd, 0, None

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self.fd

    def write(self, data: bytes | bytearray | memoryview) -> int:  # type: ignore[override]
        try:
            n = os.write(self.fd, data)
        except OSError as err:
            if self.error is None and err.errno in DISK_FULL:
                self.error = err.errno
            raise
        self.written += n
        return n


def _reserve(fd: int, size: int) -> None:
    """Allocate ``size`` bytes of ``fd`` now (a full disk fails here, before any work);
    file systems without ``fallocate`` are left to fail on the writes."""
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as err:
        if err.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            raise


@contextlib.contextmanager
def atomic_write(
    path: str | Path,
    *,
    size: int | None = None,
    estimate: bool = False,
    preallocate: bool = False,
    temp: str | Path | None = None,
    hint: str = "",
) -> Iterator[BinaryIO]:
    """Write ``path`` through a temporary file that replaces it once complete.

    Args:
        path: Target file; its folder is created.
        size: Bytes the file will hold, when known: checked against the free space
            before anything is written.
        estimate: ``size`` is an estimate (a lower bound: the check passes files that
            may still not fit; those fail on the write, as cleanly).
        preallocate: Reserve ``size`` bytes at once (exact sizes only).
        temp: The temporary file (default: ``<folder>/.<name>.tmp-<pid>``).
        hint: Where else to write (the disk-full message's last resort), e.g. which
            setting moves the file to another disk.

    Yields:
        A binary file to write into.

    Raises:
        DiskFullError: ``ENOSPC``, ``EDQUOT`` or ``EFBIG`` (the temporary file removed,
            ``path`` untouched).
    """
    path = Path(path)
    temp = Path(temp or path.with_name(f".{path.name}{TMP_MARK}{os.getpid()}"))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        free = free_bytes(path.parent)
        if size is not None and free is not None and free < size:
            raise disk_full_error(path, errno.ENOSPC, size, estimate=estimate, hint=hint)
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    except OSError as err:  # no room for the folder or the file's entry (inodes)
        if isinstance(err, DiskFullError) or err.errno not in DISK_FULL:
            raise
        raise disk_full_error(path, err.errno, size, estimate=estimate, hint=hint) from None
    sink = _Sink(fd)
    try:
        if preallocate and size:
            _reserve(fd, size)
        with io.BufferedWriter(sink, buffer_size=BUFFER_SIZE) as f:
            yield f  # type: ignore[misc]
            f.flush()
            os.fsync(fd)
        os.close(fd)
        fd = -1
        os.replace(temp, path)
    except BaseException as err:
        with contextlib.suppress(OSError):
            if fd >= 0:
                os.close(fd)  # before the unlink: the blocks are freed on the last close
            fd = -1
            temp.unlink()
        code = sink.error or disk_full_errno(err)
        if code is None or isinstance(err, DiskFullError):
            raise
        past = sink.written > (size or 0)  # more than expected was written: a lower bound
        raise disk_full_error(
            path, code, max(size or 0, sink.written) or None,
            estimate=estimate and not past, lower_bound=past or size is None, hint=hint,
        ) from None  # one error; the OSError stays in __context__  # fmt: skip
    with contextlib.suppress(OSError):  # make the rename itself durable
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's live process
    return True


def remove_stale(folder: str | Path, pattern: re.Pattern[str] = TMP_PATTERN) -> list[Path]:
    """Delete the temporary files in ``folder`` left by writers that were killed.

    Args:
        folder: The folder (nothing happens when it does not exist).
        pattern: Names of temporary files, with a ``pid`` group and optionally a
            ``host`` group (a file without one is of this host).

    Returns:
        The files removed: of this host, whose process is gone; of another host,
        unmodified for ``STALE_AFTER_S``. A live process's file is never touched.
    """
    removed: list[Path] = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    here = host_tag()
    for entry in entries:
        found = pattern.match(entry.name)
        if found is None or not entry.is_file(follow_symlinks=False):
            continue
        host = found.groupdict().get("host") or here
        try:
            if host == here:
                stale = not _alive(int(found.group("pid")))
            else:
                stale = time.time() - entry.stat().st_mtime > STALE_AFTER_S
            if stale:
                os.unlink(entry.path)
                removed.append(Path(entry.path))
        except OSError:
            continue  # gone meanwhile, or not ours to delete
    return removed


__all__ = [
    "DISK_FULL",
    "TMP_MARK",
    "atomic_write",
    "disk_full_errno",
    "disk_full_error",
    "format_bytes",
    "free_bytes",
    "host_tag",
    "remove_stale",
]
