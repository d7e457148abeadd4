"""The import picture: the shared kernel imports none of the processes; `broker`,
`controller` and `client` never import each other; nothing imports the command package.

DESIGN §2: kernel <- broker, controller, client <- minikafka_cli (the `minikafka` command).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("minikafka", "broker", "controller", "client", "minikafka_cli")
#: What each package must never import.
FORBIDDEN = {
    "minikafka": ("broker", "controller", "client", "minikafka_cli"),
    "broker": ("controller", "client", "minikafka_cli"),
    "controller": ("broker", "client", "minikafka_cli"),
    "client": ("broker", "controller", "minikafka_cli"),
    "minikafka_cli": (),
}
#: `python -m minikafka` runs the command: an entry-point shim, never imported.
EXEMPT = {ROOT / "minikafka" / "__main__.py"}


def imports_of(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def modules(package: str) -> list[Path]:
    return sorted(
        p
        for p in (ROOT / package).rglob("*.py")
        if p not in EXEMPT and "v1" not in p.relative_to(ROOT).parts
    )


@pytest.mark.parametrize("package", PACKAGES)
def test_package_imports_point_down_only(package: str) -> None:
    bad = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in modules(package)
        for name in sorted(imports_of(path))
        if name.split(".")[0] in FORBIDDEN[package]
    ]
    assert bad == []


def test_the_check_sees_a_violation(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from broker.app import run\n")
    assert "broker.app" in imports_of(module)
