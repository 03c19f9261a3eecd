"""The architecture, checked from the code's own imports (every import statement, function-level and
``TYPE_CHECKING`` ones included, read with :mod:`ast`; nothing is imported):

- the floors import strictly downward: ``r3l_envs`` <- ``wrappers`` <- ``r3l_learn`` <- ``benchmarks``;
- no import circle between library modules;
- no library module imports another module's private (leading-underscore) name.

ARCHITECTURE.md describes the floors and the rooms these rules keep apart.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FLOORS = ("r3l_envs", "wrappers", "r3l_learn", "benchmarks")  # each may import only the floors before it
LIBRARY = FLOORS[:3]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(packages: tuple[str, ...]) -> dict[str, Path]:
    return {module_name(p): p for pkg in packages for p in sorted((ROOT / pkg).rglob("*.py"))}


def imports(path: Path, known: dict[str, Path]) -> Iterator[tuple[int, str, str | None]]:
    """``(line, module, name)`` for every project import in ``path`` (see :func:`imports_in`)."""
    here = module_name(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    yield from imports_in(path.read_text(encoding="utf-8"), package, known)


def imports_in(source: str, package: str, known: dict[str, Path]) -> Iterator[tuple[int, str, str | None]]:
    """``(line, module, name)`` for every project import in ``source``, a module of ``package``: ``name`` is the
    imported name for ``from module import name`` when that is not itself a module, else ``None``."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in FLOORS:
                    yield node.lineno, alias.name, None
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against this module's package
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            if base.split(".")[0] not in FLOORS:
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                yield (node.lineno, sub, None) if sub in known else (node.lineno, base, alias.name)


def test_the_floors_import_strictly_downward():
    known = modules(FLOORS)
    upward = [
        f"{path.relative_to(ROOT)}:{line}: imports {target}"
        for name, path in known.items()
        for line, target, _ in imports(path, known)
        if FLOORS.index(target.split(".")[0]) > FLOORS.index(name.split(".")[0])
    ]
    assert not upward, "\n".join(upward)


def test_no_import_circle_between_library_modules():
    known = modules(LIBRARY)
    graph = {name: {t for _, t, _ in imports(path, known) if t in known and t != name} for name, path in known.items()}
    circles = [c for c in strongly_connected(graph) if len(c) > 1]
    assert not circles, "import circles:\n" + "\n".join(" <-> ".join(sorted(c)) for c in circles)


def test_no_library_module_imports_a_private_name_of_another():
    known = modules(LIBRARY)
    private = [
        f"{path.relative_to(ROOT)}:{line}: from {target} import {name}"
        for _, path in known.items()
        for line, target, name in imports(path, known)
        if name and name.startswith("_") and not name.startswith("__")
    ]
    assert not private, "\n".join(private)


def strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's strongly connected components of ``graph`` (iterative: deep import chains need no recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                found.append(component)
    return found


def test_the_circle_finder_finds_a_circle_and_nothing_else():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert sorted(map(sorted, strongly_connected(graph))) == [["a", "b", "c"], ["d"], ["e"]]


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("def f():\n    from wrappers.episode import _slots", [(2, "wrappers.episode", "_slots")]),
        ("import r3l_learn.algorithms.update", [(1, "r3l_learn.algorithms.update", None)]),
        ("from . import episode", [(1, "wrappers.episode", None)]),
        ("import numpy", []),
    ],
)
def test_the_import_reader_sees_function_level_relative_and_private_imports(source, expected):
    known = {"wrappers.episode": ROOT, "r3l_learn.algorithms.update": ROOT}
    assert list(imports_in(source, "wrappers", known)) == expected
