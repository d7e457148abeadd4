"""The client's shape (issue 16's acceptance): the producer and consumer facades stay
under 500 lines, no class in `client/` spans more than 300 lines, and no module of
`client/` imports itself back through others (no import cycles).

Sizes are AST spans (first to last line of the class, docstring and blank lines
included), as `wc -l` counts the files.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
CLIENT = ROOT / "client"
MAX_FACADE_LINES = 500
FACADES = ("producer.py", "consumer.py")
MAX_CLASS_LINES = 300


def class_spans(path: Path) -> dict[str, int]:
    """Every class of `path` (nested ones too) and its line span."""
    spans: dict[str, int] = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ClassDef):
            assert node.end_lineno is not None
            spans[node.name] = node.end_lineno - node.lineno + 1
    return spans


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def client_imports(path: Path, package: str, known: set[str]) -> set[str]:
    """The modules of `package` that `path` imports explicitly (anywhere in it,
    `TYPE_CHECKING` blocks and function bodies included; `from pkg import name`
    counts as importing `pkg.name` when that is a module, else `pkg`)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [
                f"{node.module}.{alias.name}"
                if f"{node.module}.{alias.name}" in known
                else node.module
                for alias in node.names
            ]
        else:
            continue
        found.update(n for n in names if n.split(".")[0] == package and n in known)
    return found


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    paths = sorted((root / package).rglob("*.py"))
    known = {module_name(p, root) for p in paths}
    return {module_name(p, root): client_imports(p, package, known) for p in paths}


def find_cycle(graph: Mapping[str, Iterable[str]]) -> list[str] | None:
    """One import cycle of `graph` as a path that ends where it starts, or None."""
    done: set[str] = set()
    for start in sorted(graph):
        if start in done:
            continue
        path: list[str] = []
        on_path: set[str] = set()
        stack: list[tuple[str, list[str]]] = [(start, sorted(graph.get(start, ())))]
        path.append(start)
        on_path.add(start)
        while stack:
            node, pending = stack[-1]
            if not pending:
                stack.pop()
                path.pop()
                on_path.discard(node)
                done.add(node)
                continue
            nxt = pending.pop(0)
            if nxt in on_path:
                return [*path[path.index(nxt) :], nxt]
            if nxt in done:
                continue
            stack.append((nxt, sorted(graph.get(nxt, ()))))
            path.append(nxt)
            on_path.add(nxt)
    return None


@pytest.mark.parametrize("name", FACADES)
def test_the_facades_stay_under_500_lines(name: str) -> None:
    lines = len((CLIENT / name).read_text().splitlines())
    assert lines < MAX_FACADE_LINES, f"client/{name} has {lines} lines"


def test_no_client_class_spans_more_than_300_lines() -> None:
    too_long = [
        f"{path.relative_to(ROOT)}: {name} spans {span} lines"
        for path in sorted(CLIENT.rglob("*.py"))
        for name, span in class_spans(path).items()
        if span > MAX_CLASS_LINES
    ]
    assert too_long == []


def test_client_has_no_import_cycles() -> None:
    graph = import_graph(ROOT, "client")
    assert "client.producer" in graph["client"]  # the graph sees imports at all
    assert find_cycle(graph) is None


def test_the_checks_see_a_violation(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.b import x\n")
    (pkg / "b.py").write_text("def f():\n    from pkg import c\n")
    (pkg / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.a\n"
    )
    graph = import_graph(tmp_path, "pkg")
    assert graph == {"pkg": set(), "pkg.a": {"pkg.b"}, "pkg.b": {"pkg.c"}, "pkg.c": {"pkg.a"}}
    assert find_cycle(graph) == ["pkg.a", "pkg.b", "pkg.c", "pkg.a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None
    big = tmp_path / "big.py"
    big.write_text("class Big:\n" + "    x = 1\n" * MAX_CLASS_LINES)
    assert class_spans(big) == {"Big": MAX_CLASS_LINES + 1}
