"""The simulations' time limit.

A simulation test is CPU-bound work bounded by its seed count (and each run by its
virtual-time limit), not a wait that can hang on another process: under load it is only
slower. The suite's 300 s limit (pytest-timeout, meant to catch hangs) cut the hole-1
canary (350 seeds, ~90 s on an idle core) in a `make test-repeat HOG=1` run, where two
busy loops shared the two cores with three test workers. The simulations get
`SIMULATION_TIMEOUT_S` instead, which still stops a run that never ends.
"""

from __future__ import annotations

from pathlib import Path

import pytest

SIMULATION_TIMEOUT_S = 1800

_HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.is_relative_to(_HERE) and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(SIMULATION_TIMEOUT_S))
