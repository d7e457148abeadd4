"""The timelines a failing scenario leaves in its artifacts (`Run.attach_timelines`,
called by `Run.verify` and by the `run` fixture when a scenario fails): one per
partition, from the controller's history and every process's log."""

from __future__ import annotations

import pytest

from tests.chaos.harness import Run, seeds

pytestmark = pytest.mark.chaos


@pytest.mark.timeout(180)
@pytest.mark.parametrize("seed", seeds())
def test_attached_timelines_show_a_leader_kill(run: Run, seed: int) -> None:
    run.start_cluster()
    partitions = run.topic("q", partitions=2)
    workload = run.workload(partitions, producers=1, consumers=0).start()
    workload.wait_acked(10, timeout_s=30)
    cluster = run.cluster
    assert cluster is not None
    leader, epoch, _ = cluster.leader_of("q", 0)
    cluster.kill(leader)
    new_leader = cluster.wait_leader("q", 0, not_in=(leader,))
    workload.stop()
    written = run.attach_timelines()
    names = sorted(path.name for path in written)
    assert names == [
        "timeline-q-0.html",
        "timeline-q-0.txt",
        "timeline-q-1.html",
        "timeline-q-1.txt",
    ]
    table = (run.artifacts / "timeline-q-0.txt").read_text()
    moved = [line for line in table.splitlines() if "leader, isr-shrink" in line]
    assert moved, table
    assert f"leader {leader} -> {new_leader} at epoch {epoch + 1}" in moved[0]
    assert f"broker {leader} (epoch" in table  # its fencing
    assert "became leader at epoch" in table  # the brokers' log lines
    assert "<svg" in (run.artifacts / "timeline-q-0.html").read_text()
    assert run.attach_timelines() == []  # once per run
