"""Reading the docs' markdown as the site renders it: fences, pipe tables, table cells.

One parser for every test that checks a page against the code (configs, results, metrics,
W&B keys), so they agree on what a table is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
ROW = re.compile(r"^\s*\|.*\|\s*$")
DELIMITER = re.compile(r"^\s*\|(\s*:?-+:?\s*\|)+\s*$")


def in_fence(lines: list[str]) -> list[bool]:
    """For each line, whether it belongs to a fenced code block (fence lines included)."""
    flags, fence = [], None
    for line in lines:
        m = FENCE.match(line)
        if fence is None and m:
            fence = m.group(1)[0]
            flags.append(True)
        elif fence is not None:
            flags.append(True)
            if m and m.group(1)[0] == fence:
                fence = None
        else:
            flags.append(False)
    return flags


def cells(line: str) -> list[str]:
    """The cells of a table row; a ``|`` inside a code span (``|ẑ|``) is text, as in
    Python-Markdown's tables."""
    out, cell, code = [], "", False
    for char in line.strip().removeprefix("|").removesuffix("|"):
        code ^= char == "`"
        if char == "|" and not code:
            out.append(cell.strip())
            cell = ""
        else:
            cell += char
    return [*out, cell.strip()]


@dataclass
class Table:
    """A pipe table: ``start`` is the index of its header line, ``rows`` its raw lines
    (header, delimiter, body)."""

    start: int
    rows: list[str]

    @property
    def header(self) -> str:
        return self.rows[0].strip()

    @property
    def columns(self) -> list[str]:
        return cells(self.rows[0])

    @property
    def body(self) -> list[list[str]]:
        return [cells(row) for row in self.rows[2:]]


def tables(lines: list[str]) -> list[Table]:
    """Every pipe table outside code blocks: a header row, a delimiter row, body rows."""
    fenced = in_fence(lines)
    found, i = [], 0
    while i < len(lines) - 1:
        if not fenced[i] and ROW.match(lines[i]) and DELIMITER.match(lines[i + 1]):
            j = i + 2
            while j < len(lines) and not fenced[j] and ROW.match(lines[j]):
                j += 1
            found.append(Table(i, lines[i:j]))
            i = j
        else:
            i += 1
    return found
