"""Fixtures of the fault suite."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.chaos.harness import Run, scenario


@pytest.fixture
def run(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Run]:
    """A scenario run named after the test, seeded by its `seed` parameter."""
    seed = (
        int(request.node.callspec.params.get("seed", 1)) if hasattr(request.node, "callspec") else 1
    )
    with scenario(request.node.name, seed, tmp_path) as active:
        yield active
