"""Adversarial review of issues 14/15 on the real replica layer (findings, strict xfail).

The broker half of the controller findings in
`tests/unit/controller/test_controller_review_holes.py`: what a real `Partition` does
when a topic config that the controller's safety rules depend on changes under it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.inproc import TOPIC, ManualClock, Node

A = 1


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    made = Node(A, tmp_path / "broker-1", ManualClock())
    yield made
    made.close()


@pytest.mark.xfail(
    strict=True,
    reason="hole: switching flush.policy to fsync leaves the records committed before it "
    "unflushed, yet the controller then excuses an unclean restart",
)
async def test_flush_policy_fsync_covers_records_committed_before_the_switch(node: Node) -> None:
    """The controller (`state_machine._replica_loss`) treats a replica of a topic whose
    flush.policy is fsync as having lost nothing in an unclean restart, on the rule
    "every offset below the HW was fsynced". On the broker, `Partition.update_settings`
    (called when the new config arrives) only swaps the settings: records appended and
    committed under flush.policy=none stay unflushed (flush.ms defaults to never), below
    the HW, after the switch. A power loss then takes them, and the controller keeps the
    replica in the ISR. Fix (either side): flush the whole log when flush.policy becomes
    fsync and report it, or (simpler, in the controller) never excuse an UNFLUSHED
    restart on the topic's current policy."""
    node.apply(leader=A, leader_epoch=1, isr=(A,), replicas=(A,))
    assert (await node.produce([b"v%d" % i for i in range(5)], acks=-1)).error_code == 0
    log = node.partition().log
    assert log.high_watermark == 5
    assert log.recovery_point == 0  # committed, not fsynced (flush.policy=none)

    node.topic_configs[TOPIC] = {"flush.policy": "fsync"}
    node.replicas.refresh_settings(TOPIC)
    assert node.partition().settings.fsync

    assert log.recovery_point >= log.high_watermark, (
        f"records {log.recovery_point}..{log.high_watermark - 1} are committed and still "
        "unflushed under flush.policy=fsync"
    )
