"""The pure group modules import nothing that does I/O, waits, or reads a clock."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PURE_MODULES = ("model", "assignors", "reconcile", "membership", "offsets")
FORBIDDEN = ("asyncio", "time", "random", "socket", "threading", "grpc", "os", "minikafka.v1")
GROUP_DIR = Path(__file__).resolve().parents[4] / "broker" / "group"


def imported_modules(source: str) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize("name", PURE_MODULES)
def test_pure_group_module_imports(name: str) -> None:
    source = (GROUP_DIR / f"{name}.py").read_text()
    bad = sorted(
        m
        for m in imported_modules(source)
        if any(m == f or m.startswith(f + ".") for f in FORBIDDEN)
    )
    assert bad == [], f"broker/group/{name}.py imports {bad}"
