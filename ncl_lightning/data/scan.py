"""Listing image folders without walking into directory links that lead back into the data.

One walker for every DataModule that scans folders (``
scan_class_folders``). Rules for a **directory link** met during a scan (file links are
always read: a subset built by symlinking image files works):

* a link to the folder that holds it or to one of its ancestors is skipped (a loop:
  ``train/airplane/up -> ..`` would otherwise list the tree again and again);
* a link to a folder inside one of the scan's ``trees`` (the dataset root and its split
  folders) is skipped: its images are already listed under their own folder, or belong
  to another split or class (``train/cat/more -> ../../val/cat`` would leak them);
* a link to a folder **outside** those trees is followed (a class folder or a sub-folder
  kept on another disk), once: a folder already scanned, reached again through any link,
  is skipped, so loops outside the trees end too (identity: ``(st_dev, st_ino)``).

The folders passed in as starting points (a split folder, a class folder) are always
read, links or not. Every skipped link is recorded with its target and the reason, and
[`warn_skipped_links`][] reports them in one warning per split.

A scan never blocks, whatever a folder holds: only regular files are listed (checked
with ``stat``, nothing is opened: a named pipe opened for reading would wait forever
for a writer); a named pipe, a device, a socket, a broken link or a link loop with an
image's extension is recorded and reported in one warning; a scan listing more than
[`MAX_ENTRIES`][] entries stops with an error naming the folder.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from lightning.pytorch.utilities import rank_zero_warn

from ncl_lightning.foundation.errors import DataError

SHOWN = 3  # skipped links named in the warning before "and N more"
#: Entries one scan lists at most (ImageNet-21k has 14 million files).
MAX_ENTRIES = 50_000_000
LINK, FILE = "link", "file"


class SkippedLink(NamedTuple):
    """A directory link the scan did not follow (``kind`` ``"link"``), or an entry with
    an image's extension that is not a regular file (``kind`` ``"file"``)."""

    path: str
    target: str
    reason: str
    kind: str = LINK


def _special(path: str) -> str:
    """Why ``path`` (neither a folder nor a regular file) is not read, from ``stat``."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "a broken link"
    except OSError as err:
        return "a link loop" if err.errno == errno.ELOOP else f"unreadable: {err.strerror}"
    kinds = [(stat.S_ISFIFO, "a named pipe"), (stat.S_ISCHR, "a device"),
             (stat.S_ISBLK, "a device"), (stat.S_ISSOCK, "a socket")]  # fmt: skip
    return next((words for test, words in kinds if test(mode)), "not a regular file")


def _entry_kind(entry: os.DirEntry[str]) -> str:
    """``"dir"``, ``"file"`` (regular, links followed) or ``"other"``; never opens it."""
    try:
        if entry.is_dir():
            return "dir"
        return "file" if entry.is_file() else "other"
    except OSError:  # a link loop (ELOOP), a name too long...
        return "other"


def _inside(path: str, folder: str) -> bool:
    """Whether the real path ``path`` is ``folder`` or lies under it."""
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


@dataclass
class FolderScan:
    """One scan of a split: the trees links may not lead into, the folders seen so far
    and the links skipped.

    Args:
        trees: Folders whose content is listed on its own (dataset root, split folders);
            a directory link into any of them is skipped.

    Attributes:
        skipped: The directory links not followed, in the order met.
    """

    trees: Sequence[Path]
    skipped: list[SkippedLink] = field(default_factory=list)
    max_entries: int = MAX_ENTRIES
    _listed: int = field(default=0, init=False)
    _real_trees: list[str] = field(default_factory=list, init=False)
    _seen: set[tuple[int, int]] = field(default_factory=set, init=False)

    def __post_init__(self) -> None:
        self._real_trees = [os.path.realpath(t) for t in self.trees]

    def _follow(self, path: str, parent_real: str, mark: bool = True) -> str | None:
        """The real path to descend into for the folder ``path`` (whose parent's real
        path is ``parent_real``), or ``None`` (recorded in [`skipped`][]) for a link
        that must not be followed or a folder already scanned; ``mark``: remember it as
        scanned."""
        real = os.path.realpath(path) if os.path.islink(path) else None
        if real is not None:
            if _inside(parent_real, real):
                return self._skip(path, real, "a loop: it points to an ancestor")
            if any(_inside(real, tree) for tree in self._real_trees):
                return self._skip(path, real, "points inside the dataset")
        stat = os.stat(path)
        if (stat.st_dev, stat.st_ino) in self._seen:
            return self._skip(path, real or path, "a folder already scanned")
        if mark:
            self._seen.add((stat.st_dev, stat.st_ino))
        return real or os.path.join(parent_real, os.path.basename(path))

    def _skip(self, path: str, target: str, reason: str) -> None:
        self.skipped.append(SkippedLink(path, target, reason))
        return None

    def enter(self, top: Path) -> SkippedLink | None:
        """Check a starting folder (a class folder) by the same rules as any sub-folder;
        the skipped link if it may not be read, else ``None``."""
        before = len(self.skipped)
        self._follow(str(top), os.path.realpath(top.parent))
        return self.skipped.pop() if len(self.skipped) > before else None

    def subfolders(self, folder: Path) -> list[str]:
        """Sorted names of the sub-folders of ``folder`` (class folders) this scan may
        read (not yet marked as scanned); the others are recorded as skipped."""
        with os.scandir(folder) as entries:
            names = sorted(e.name for e in entries if _entry_kind(e) == "dir")
        real = os.path.realpath(folder)
        return [n for n in names if self._follow(os.path.join(folder, n), real, mark=False)]

    def files(self, top: Path, extensions: tuple[str, ...]) -> list[str]:
        """Sorted paths (as seen through ``top``) of the files under ``top`` whose names
        end with one of ``extensions`` (lower-cased), by the rules of this module.

        ``top`` itself is read as given (check it with [`enter`][] first).

        Raises:
            DataError: A folder cannot be listed (permissions, I/O error); names it.
        """
        stack = [(str(top), os.path.realpath(top))]
        found: list[str] = []
        while stack:
            folder, real = stack.pop()
            try:
                with os.scandir(folder) as it:
                    entries = sorted(it, key=lambda e: e.name)
            except OSError as err:  # os.walk would skip it silently
                raise DataError(f"cannot list folder {folder}: {err.strerror or err}") from err
            self._count(len(entries), top)
            for entry in entries:
                kind = _entry_kind(entry)
                if kind == "dir":
                    child_real = self._follow(entry.path, real)
                    if child_real is not None:
                        stack.append((entry.path, child_real))
                elif entry.name.lower().endswith(extensions):
                    if kind == "file":
                        found.append(entry.path)
                    else:
                        target = os.readlink(entry.path) if entry.is_symlink() else ""
                        reason = _special(entry.path)
                        self.skipped.append(SkippedLink(entry.path, target, reason, FILE))
        return sorted(found)

    def _count(self, n: int, top: Path) -> None:
        self._listed += n
        if self._listed > self.max_entries:
            raise DataError(
                f"scanning {top}: more than {self.max_entries:,} entries listed; is it an "
                "image folder? (for a larger dataset raise ncl_lightning.data.scan.MAX_ENTRIES)"
            )


def warn_skipped_links(skipped: Sequence[SkippedLink], folder: Path, key: str) -> None:
    """One warning (rank zero) counting the directory links a scan of ``folder`` skipped
    and naming the first ones; one more for the entries that are not regular files."""
    links = [s for s in skipped if s.kind == LINK]
    if links:
        rank_zero_warn(
            f"{key}: skipped {len(links)} directory link(s) under {folder} (links into the "
            f"dataset or loops are not followed; links to folders outside it are followed "
            f"once): {_first(links, lambda s: f'{s.path} -> {s.target} ({s.reason})')}"
        )
    files = [s for s in skipped if s.kind == FILE]
    if files:
        one = len(files) == 1
        rank_zero_warn(
            f"{key}: skipped {len(files)} entr{'y' if one else 'ies'} under {folder} that "
            f"{'is' if one else 'are'} not a regular file (never opened: a named pipe would "
            f"wait forever): {_first(files, lambda s: f'{s.path} ({s.reason})')}"
        )


def _first(items: Sequence[SkippedLink], describe: Callable[[SkippedLink], str]) -> str:
    """The first [`SHOWN`][] items described, then how many more."""
    more = f"; and {len(items) - SHOWN} more" if len(items) > SHOWN else ""
    return "; ".join(describe(s) for s in items[:SHOWN]) + more


__all__ = ["MAX_ENTRIES", "FolderScan", "SkippedLink", "warn_skipped_links"]
