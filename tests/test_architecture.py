"""The layer rule of ``docs/architecture.md``, read from the package's own imports.

Every ``import`` of the package is read with :mod:`ast` (those inside functions too; only
``if TYPE_CHECKING:`` blocks are left out, they never run). A module may import its own
layer and the layers below it, never one above; and the imports form no circle, neither
between modules nor between packages. A failure names the offending import.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "ncl_lightning"

# Bottom to top. A package is the first name under ``ncl_lightning``; a module of the top
# package (``ncl_lightning/__init__.py``, ``entry.py``) and every ``__main__`` module is an
# entry point, above everything.
LAYERS: tuple[tuple[str, frozenset[str]], ...] = (
    ("foundation", frozenset({"foundation"})),
    ("core", frozenset({"losses", "nn", "metrics", "optim", "checkpoints", "plot", "callbacks"})),
    ("model", frozenset({"data", "methods"})),
    ("components", frozenset({"evaluation"})),
    ("shell", frozenset({"runtime"})),
    ("tools", frozenset({"atlas", "studies", "demo", "export"})),
    ("entry", frozenset({"<top>", "entry", "__main__"})),
)
RANK = {package: rank for rank, (_, packages) in enumerate(LAYERS) for package in packages}
LAYER_NAME = {package: name for name, packages in LAYERS for package in packages}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_of(module: str) -> str:
    """The layer key of a module: ``__main__`` modules and the top package are entries."""
    parts = module.split(".")
    if parts[-1] == "__main__":
        return "__main__"
    return parts[1] if len(parts) > 1 else "<top>"


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST):
    """``(node)`` for every import statement outside ``if TYPE_CHECKING:`` blocks."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _type_checking(node):
            yield from (n for child in node.orelse for n in _imports_of(child))
            continue
        yield from _imports_of(node)


def _imports_of(node: ast.AST):
    if isinstance(node, ast.Import | ast.ImportFrom):
        yield node
    else:
        yield from _imports(node)


def resolve(name: str, modules: set[str]) -> str:
    """The module ``name`` refers to (``pkg.mod.func`` -> ``pkg.mod``)."""
    while name not in modules and "." in name:
        name = name.rsplit(".", 1)[0]
    return name


def import_edges() -> dict[str, dict[str, int]]:
    """``{module: {imported module: line}}`` over the package's modules."""
    paths = {module_name(p): p for p in ROOT.rglob("*.py")}
    modules = set(paths)
    edges: dict[str, dict[str, int]] = {m: {} for m in modules}
    for module, path in paths.items():
        is_package = path.name == "__init__.py"
        for node in _imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                base = node.module or ""
                if node.level:
                    anchor = module.split(".")
                    anchor = anchor[: len(anchor) - node.level + (1 if is_package else 0)]
                    base = ".".join(anchor + ([base] if base else []))
                names = [f"{base}.{a.name}" for a in node.names]
            for name in names:
                if name.split(".")[0] != "ncl_lightning":
                    continue
                target = resolve(name, modules)
                if target != module:
                    edges[module].setdefault(target, node.lineno)
    return edges


EDGES = import_edges()


def where(module: str, target: str) -> str:
    path = module.replace(".", "/")
    path += "/__init__.py" if (ROOT.parent / path).is_dir() else ".py"
    return f"{path}:{EDGES[module][target]} imports {target}"


def test_every_package_has_a_layer() -> None:
    unknown = sorted({package_of(m) for m in EDGES} - set(RANK))
    assert not unknown, f"packages without a layer in LAYERS: {unknown}"


def test_imports_only_go_down() -> None:
    wrong = [
        f"{where(m, t)} ({LAYER_NAME[package_of(m)]} -> {LAYER_NAME[package_of(t)]})"
        for m, targets in sorted(EDGES.items())
        for t in sorted(targets)
        if RANK[package_of(t)] > RANK[package_of(m)]
    ]
    assert not wrong, "imports up the layers:\n" + "\n".join(wrong)


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's components with more than one node (each is a circle of imports)."""
    sys.setrecursionlimit(max(10_000, sys.getrecursionlimit()))
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _is_init_of(target: str, module: str) -> bool:
    """``target`` is a package ``__init__`` above ``module`` (``from pkg import x`` inside
    ``pkg`` runs the package first; not a circle between modules)."""
    return module.startswith(target + ".")


def test_no_circle_between_modules() -> None:
    graph = {
        m: {t for t in targets if not _is_init_of(t, m) and not _is_init_of(m, t)}
        for m, targets in EDGES.items()
    }
    circles = strongly_connected(graph)
    lines = []
    for circle in circles:
        members = set(circle)
        lines += [where(m, t) for m in circle for t in sorted(graph[m]) if t in members]
    assert not circles, "import circles:\n" + "\n".join(lines)


def test_no_circle_between_packages() -> None:
    graph: dict[str, set[str]] = {}
    for m, targets in EDGES.items():
        for t in targets:
            if package_of(m) != package_of(t):
                graph.setdefault(package_of(m), set()).add(package_of(t))
    circles = strongly_connected(graph)
    lines = [
        where(m, t)
        for circle in circles
        for m, targets in sorted(EDGES.items())
        for t in sorted(targets)
        if package_of(m) in circle and package_of(t) in circle and package_of(m) != package_of(t)
    ]
    assert not circles, "package circles:\n" + "\n".join(lines)


def test_foundation_imports_nothing_of_ours() -> None:
    wrong = [
        where(m, t)
        for m, targets in sorted(EDGES.items())
        if package_of(m) == "foundation"
        for t in sorted(targets)
        if package_of(t) != "foundation"
    ]
    assert not wrong, "\n".join(wrong)
