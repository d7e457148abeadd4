"""Fixtures with real processes on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.processes import ServerProcess, standalone_broker_process


class StandaloneBroker:
    def __init__(self, process: ServerProcess, data_dir: Path) -> None:
        self.process = process
        self.data_dir = data_dir

    @property
    def bootstrap(self) -> str:
        return self.process.address


@pytest.fixture
def standalone_broker(tmp_path: Path) -> Iterator[StandaloneBroker]:
    """A `minikafka broker --standalone` process; stopped (by pid) after the test."""
    data_dir = tmp_path / "broker-1"
    process = standalone_broker_process(data_dir).start()
    try:
        yield StandaloneBroker(process, data_dir)
    finally:
        if process.alive():
            process.terminate()
