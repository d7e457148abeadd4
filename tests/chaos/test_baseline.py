"""R01: a healthy cluster under the queue workload shows no anomaly at all."""

from __future__ import annotations

import time

import pytest

from tests.chaos.harness import LONG, Run, seeds

pytestmark = pytest.mark.chaos


@pytest.mark.timeout(180)
@pytest.mark.parametrize("seed", seeds())
def test_r01_healthy_baseline(run: Run, seed: int) -> None:
    cluster = run.start_cluster()
    partitions = run.topic("q", partitions=4)
    workload = run.workload(partitions, producers=3, consumers=2).start()
    deadline = time.monotonic() + (60 if LONG else 12)
    workload.wait_acked(200)
    while time.monotonic() < deadline:  # the workload runs for the stated duration
        workload.wait_acked(workload.acked + 1)
    workload.stop()
    workload.final_polls()
    result = run.verify()
    assert result.error_types == []
    assert result.stats["sends-ok"] >= 200
    assert result.stats["sends-fail"] == 0
    cluster.wait_identical_replicas("q", 4)
