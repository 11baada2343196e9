"""The results page gathers every measured table of the docs, each with its command.

`docs/results.md` includes the tables of the evaluation, ground-truth and performance pages
through pymdown snippet sections: the source page wraps a table (with its command) in
`<!-- --8<-- [start:NAME] -->` ... `<!-- --8<-- [end:NAME] -->` and the results page has
the line `--8<-- "docs/<page>.md:NAME"`. The includes are resolved here in Python, without
building the site.

Definitions used by the checks:

* **table**: outside fenced code, a row `| ... |` directly followed by a delimiter row
  `|---|...`, with the rows that follow it;
* **section** of a page: the lines from one heading (`#` to `######`, outside fenced code)
  to the next;
* **command**: in the table's section, a fenced code block with a line that runs the
  project (`make <target>`, `ncl-cli <subcommand>`, `python -m ncl_lightning...`,
  `python -m benchmarks`), or the word `Command` followed, before any colon, by `:` and
  a code span that does;
* **measured table** of a source page: every table except those listed in
  `REFERENCE_TABLES` (set-up and key tables, which describe rather than measure). Each
  measured table must sit inside a snippet section, and every snippet section of a source
  page must be included by the results page, so a new table that is not gathered fails.
"""

from __future__ import annotations

import itertools
import re

import yaml

from tests.conftest import ROOT
from tests.helpers.markdown import ROW, in_fence, tables

RESULTS = "docs/results.md"
SOURCES = ("docs/evaluation.md", "docs/ground-truth.md", "docs/performance.md", "docs/atlas.md")

# Tables of the source pages that describe rather than measure, by header row.
REFERENCE_TABLES = {
    "docs/evaluation.md": {
        "| protocol | module | command | paper settings |",
        "| rule | ranks by the EA of | NCL paper Table 1 row |",
        "| config | space | rules | runs |",
        "| selection | linear CL | linear NCL | retrieval CL | retrieval NCL | transfer CL | "
        "transfer NCL |",
    },
    "docs/ground-truth.md": {"| piece | where | what |"},
    "docs/performance.md": {"| part | before | now |", "| `step_mode` | what runs | where |"},
    "docs/atlas.md": set(),
}

LOOKS_LIKE_MARKER = re.compile(r"-+8<-+\s*\[")
MARKER = re.compile(r"^<!-- --8<-- \[(start|end):([a-z][-_0-9a-z]*)\] -->$")
INCLUDE = re.compile(r'^\s*-+8<-+\s+"([^"]+)"\s*$')
HEADING = re.compile(r"^#{1,6}\s")
RUNS = r"(?:make [a-z]|ncl-cli [a-z]|(?:\.venv/bin/)?python -m (?:ncl_lightning|benchmarks)\b)"
RUNS_LINE = re.compile(r"^\s*" + RUNS)
INLINE_COMMAND = re.compile(r"\bCommand\b[^:`]*:\s*`\s*" + RUNS)
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b|\bdate not recorded\b")
MACHINE = re.compile(r"\b(?:CPU|GPU)s?\b")
DEMO_HEADER = "| method | online linear acc |"


def read(rel: str) -> list[str]:
    return (ROOT / rel).read_text(encoding="utf-8").splitlines()


def heading_sections(lines: list[str]) -> list[tuple[str, int, int]]:
    """(heading, first line, end line) of each part between two headings."""
    fenced = in_fence(lines)
    starts = [i for i, line in enumerate(lines) if not fenced[i] and HEADING.match(line)]
    bounds = [0, *starts, len(lines)]
    return [
        (lines[a] if a in starts else "(top of page)", a, b)
        for a, b in itertools.pairwise(bounds)
        if b > a
    ]


def snippet_sections(rel: str) -> dict[str, tuple[int, int]]:
    """Name -> (first content line, end marker line) of each well-formed section of a page."""
    lines = read(rel)
    opened: dict[str, int] = {}
    spans: dict[str, tuple[int, int]] = {}
    for i, line in enumerate(lines):
        if not LOOKS_LIKE_MARKER.search(line):
            continue
        m = MARKER.match(line)
        assert m, f"{rel}:{i + 1}: section marker not in the form <!-- --8<-- [start:name] -->"
        kind, name = m.groups()
        if kind == "start":
            assert name not in opened and name not in spans, f"{rel}:{i + 1}: {name} again"
            opened[name] = i + 1
        else:
            assert name in opened, f"{rel}:{i + 1}: end of {name} without its start"
            spans[name] = (opened.pop(name), i)
        between_rows = 0 < i < len(lines) - 1 and all(ROW.match(lines[k]) for k in (i - 1, i + 1))
        assert not between_rows, f"{rel}:{i + 1}: marker inside a table"
    assert not opened, f"{rel}: sections never closed: {sorted(opened)}"
    return spans


def section_lines(rel: str, name: str) -> list[str]:
    spans = snippet_sections(rel)
    assert name in spans, f"{rel} has no snippet section {name!r}"
    first, end = spans[name]
    return [line for line in read(rel)[first:end] if not MARKER.match(line)]


def includes(rel: str) -> list[tuple[str, str]]:
    """(file, section) of every `--8<-- "file:section"` line of a page."""
    found = []
    for line in read(rel):
        m = INCLUDE.match(line)
        if m:
            path, _, name = m.group(1).rpartition(":")
            assert path and name, f"{rel}: include without a section: {line.strip()}"
            found.append((path, name))
    return found


def resolve_lines(lines: list[str], depth: int = 0) -> list[str]:
    assert depth < 5, "includes nested too deep"
    out = []
    for line in lines:
        m = INCLUDE.match(line)
        if m:
            path, _, name = m.group(1).rpartition(":")
            out.extend(resolve_lines(section_lines(path, name), depth + 1))
        elif not MARKER.match(line):
            out.append(line)
    return out


def resolve(rel: str) -> list[str]:
    """The page as the site renders it: includes replaced, section markers dropped."""
    return resolve_lines(read(rel))


def has_command(lines: list[str]) -> bool:
    fenced = in_fence(lines)
    if any(f and RUNS_LINE.match(line) for f, line in zip(fenced, lines, strict=True)):
        return True
    prose = "\n".join(line for f, line in zip(fenced, lines, strict=True) if not f)
    return INLINE_COMMAND.search(prose) is not None


def test_every_include_names_an_existing_section() -> None:
    found = includes(RESULTS)
    assert found, "the results page includes nothing"
    assert len(found) == len(set(found)), "a section is included twice"
    for path, name in found:
        assert (ROOT / path).is_file(), f"{RESULTS} includes a missing file {path}"
        assert name in snippet_sections(path), f"{path} has no section {name!r}"


def test_every_table_on_the_page_has_command_machine_and_date() -> None:
    page = resolve(RESULTS)
    page_tables = tables(page)
    assert page_tables, "the results page has no tables"
    missing = []
    for heading, a, b in heading_sections(page):
        here = [t for t in page_tables if a <= t.start < b]
        if not here:
            continue
        part = page[a:b]
        text = "\n".join(part)
        problems = [
            what
            for what, ok in (
                ("command", has_command(part)),
                ("machine", MACHINE.search(text)),
                ("date", DATE.search(text)),
            )
            if not ok
        ]
        if problems:
            missing.append(f"{heading}: {', '.join(problems)} ({len(here)} tables)")
    assert not missing, "tables without " + "; ".join(missing)


def test_demo_table_equals_the_readme_table() -> None:
    readme = [t for t in tables(read("README.md")) if t.header.startswith(DEMO_HEADER)]
    assert readme, "README.md has no demo table"
    page = read(RESULTS)
    demo = [(h, a, b) for h, a, b in heading_sections(page) if "Demo" in h]
    assert len(demo) == 1, "the results page needs one section whose heading names the demo"
    _, a, b = demo[0]
    ours = [t for t in tables(page) if a <= t.start < b and t.header.startswith(DEMO_HEADER)]
    assert ours, "the demo section has no demo table"
    assert [r.strip() for r in ours[0].rows] == [r.strip() for r in readme[0].rows], (
        "the demo table of docs/results.md differs from the README's"
    )


def test_every_measured_table_of_the_source_pages_is_gathered() -> None:
    included = set(includes(RESULTS))
    for rel in SOURCES:
        spans = snippet_sections(rel)
        source_tables = tables(read(rel))
        headers = {t.header for t in source_tables}
        stale = REFERENCE_TABLES[rel] - headers
        assert not stale, f"{rel}: REFERENCE_TABLES names tables that no longer exist: {stale}"
        for t in source_tables:
            if t.header in REFERENCE_TABLES[rel]:
                continue
            inside = [n for n, (first, end) in spans.items() if first <= t.start < end]
            assert inside, (
                f"{rel}:{t.start + 1}: measured table {t.header!r} is in no snippet section; "
                f"wrap it in <!-- --8<-- [start:NAME] --> / [end:NAME] and include it in "
                f"{RESULTS} (or list it in REFERENCE_TABLES if it measures nothing)"
            )
        not_gathered = sorted(n for n in spans if (rel, n) not in included)
        assert not not_gathered, f"{rel}: sections not included in {RESULTS}: {not_gathered}"


def test_source_pages_render_without_markers() -> None:
    for rel in (*SOURCES, RESULTS):
        rendered = resolve(rel)
        leftover = [line for line in rendered if LOOKS_LIKE_MARKER.search(line)]
        assert not leftover, f"{rel}: markers left in the rendered page: {leftover}"
        source_rows = [r for t in tables(read(rel)) for r in t.rows]
        if rel != RESULTS:  # a source page keeps every table intact once markers go
            assert [r for t in tables(rendered) for r in t.rows] == source_rows, (
                f"{rel}: a section marker splits a table"
            )


def test_mkdocs_resolves_includes_from_the_repository_root() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    extensions = config["markdown_extensions"]
    snippets = next(
        e["pymdownx.snippets"]
        for e in extensions
        if isinstance(e, dict) and "pymdownx.snippets" in e
    )
    assert snippets["check_paths"] is True
    assert "." in snippets["base_path"]
