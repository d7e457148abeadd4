"""Review of branch `datapath` (issue 19): parked acks=all produces are completed by the
state change that decides them (`Partition._complete_parked`) and a timer. Schedules
around role changes, epoch bounces and cancellation (in-process replicas, no sleeps).
These pass on the branch: they pin the issue 14 hole 3 rules on the new mechanism.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.replica.manager import ProduceResult
from minikafka.errors import ErrorCode
from tests.support.inproc import ManualClock, Node

A, B, C = 1, 2, 3
REPLICAS = (A, B, C)


@pytest.fixture
def leader(tmp_path: Path) -> Iterator[Node]:
    node = Node(A, tmp_path / "broker-1", ManualClock())
    node.topic_configs["t"] = {"min.insync.replicas": "2"}
    node.apply(leader=A, leader_epoch=1, isr=REPLICAS, replicas=REPLICAS)
    node.replicas.set_isr_eligible({A: 10, B: 20, C: 30})
    yield node
    node.close()


async def _parked(node: Node, count: int) -> list[asyncio.Task[ProduceResult]]:
    tasks: list[asyncio.Task[ProduceResult]] = [
        asyncio.create_task(node.produce([b"x"], acks=-1, timeout_ms=60_000)) for _ in range(count)
    ]
    for _ in range(3):
        await asyncio.sleep(0)
    assert len(node.partition()._parked) == count
    return tasks


async def test_leader_to_follower_answers_every_parked_produce_indefinite(leader: Node) -> None:
    tasks = await _parked(leader, 3)
    leader.apply(leader=B, leader_epoch=2, isr=REPLICAS, replicas=REPLICAS)
    results = await asyncio.wait_for(asyncio.gather(*tasks), 5)
    for result in results:
        assert result.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert result.indefinite
    assert leader.partition()._parked == []


async def test_an_epoch_bounce_back_to_this_leader_never_answers_success(leader: Node) -> None:
    """A -> B -> A in one loop turn, then the HW passes the old offsets (RF=1 ISR):
    the batch may have been truncated and refilled meanwhile, so the answer stays
    indefinite NOT_LEADER_OR_FOLLOWER (issue 14), never NONE."""
    (task,) = await _parked(leader, 1)
    leader.apply(leader=B, leader_epoch=2, isr=REPLICAS, replicas=REPLICAS)
    leader.apply(leader=A, leader_epoch=3, isr=(A,), replicas=REPLICAS)
    leader.topic_configs["t"] = {"min.insync.replicas": "1"}
    await leader.produce([b"y"], acks=1)
    result = await asyncio.wait_for(task, 5)
    assert result.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert result.indefinite


async def test_a_cancelled_parked_produce_leaves_no_waiter(leader: Node) -> None:
    (task,) = await _parked(leader, 1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert leader.partition()._parked == []
    leader.apply(leader=B, leader_epoch=2, isr=REPLICAS, replicas=REPLICAS)  # no answer twice
