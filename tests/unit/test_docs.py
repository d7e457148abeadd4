"""The repository carries its own docs: every relative link of the README and docs/
resolves to a file of the repository, and the README points at no design document
outside it (issue 21 item 5)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\((?!https?://|#)([^)#\s]+)(?:#[^)]*)?\)")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    broken = [
        target
        for target in LINK.findall(page.read_text(encoding="utf-8"))
        if not (page.parent / target).resolve().is_relative_to(ROOT)
        or not (page.parent / target).exists()
    ]
    assert broken == []


def test_the_readme_points_inside_the_repository() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "DESIGN" not in text
    assert "docs/architecture.md" in text
    assert "## Compatibility and limits" in text


def test_the_license_is_the_one_pyproject_names() -> None:
    assert 'license = { text = "Apache-2.0" }' in (ROOT / "pyproject.toml").read_text()
    assert "Apache License" in (ROOT / "LICENSE").read_text()
    assert "Version 2.0, January 2004" in (ROOT / "LICENSE").read_text()
