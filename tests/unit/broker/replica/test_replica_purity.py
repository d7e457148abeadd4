"""The pure replica modules import nothing that does I/O, waits, or reads a clock."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PURE_MODULES = ("state", "isr", "high_watermark", "truncation", "transitions", "follower_fetch")
FORBIDDEN = ("asyncio", "time", "random", "socket", "threading", "grpc", "os", "minikafka.v1")
REPLICA_DIR = Path(__file__).resolve().parents[4] / "broker" / "replica"


def imported_modules(source: str) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def is_forbidden(module: str) -> bool:
    return any(module == bad or module.startswith(bad + ".") for bad in FORBIDDEN)


@pytest.mark.parametrize("name", PURE_MODULES)
def test_pure_module_imports(name: str) -> None:
    source = (REPLICA_DIR / f"{name}.py").read_text()
    bad = sorted(m for m in imported_modules(source) if is_forbidden(m))
    assert bad == [], f"broker/replica/{name}.py imports {bad}"


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        pytest.param("import time", True, id="import"),
        pytest.param("from asyncio import sleep", True, id="from-import"),
        pytest.param("import grpc.aio", True, id="submodule"),
        pytest.param("from minikafka.v1 import broker_pb2", True, id="generated-code"),
        pytest.param("import timeit", False, id="prefix-is-not-a-match"),
        pytest.param("from minikafka.errors import ErrorCode", False, id="allowed"),
    ],
)
def test_purity_check_detects_imports(source: str, expected: bool) -> None:
    assert any(is_forbidden(m) for m in imported_modules(source)) is expected
