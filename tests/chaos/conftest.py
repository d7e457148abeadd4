"""Fixtures of the fault suite."""

from __future__ import annotations

from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.chaos.harness import Run, scenario

#: The item attribute holding the outcome of the test's call phase.
CALL_REPORT = "chaos_call_report"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[Any]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Remember the call phase's report, so the `run` fixture knows the test failed."""
    report = yield
    if report.when == "call":
        setattr(item, CALL_REPORT, report)
    return report


@pytest.fixture
def run(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Run]:
    """A scenario run named after the test, seeded by its `seed` parameter. A failing
    scenario leaves a timeline of each of its partitions in its artifacts."""
    seed = (
        int(request.node.callspec.params.get("seed", 1)) if hasattr(request.node, "callspec") else 1
    )
    with scenario(request.node.name, seed, tmp_path) as active:
        yield active
        report = getattr(request.node, CALL_REPORT, None)
        if report is not None and report.failed:
            active.attach_timelines()
