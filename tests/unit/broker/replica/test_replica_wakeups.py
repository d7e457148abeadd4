"""Issue 19: how many loop iterations the acks=all path loses between a state change and
the waiter it completes (in-process brokers, manual clock, no sleeps: counted turns).

Each `await asyncio.sleep(0)` lets the loop run once; a wake-up that goes through shields,
`wait_for` or `gather` needs several, each behind everything else queued on a busy broker.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.replica.manager import FetchResult
from minikafka.errors import ErrorCode
from tests.support.inproc import ManualClock, Node, item

A, B, C = 1, 2, 3
REPLICAS = (A, B, C)
EPOCHS = {A: 10, B: 20, C: 30}


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[dict[int, Node]]:
    clock = ManualClock()
    made = {b: Node(b, tmp_path / f"broker-{b}", clock) for b in REPLICAS}
    for node in made.values():
        node.topic_configs["t"] = {"min.insync.replicas": "2"}
        node.apply(leader=A, leader_epoch=1, isr=REPLICAS, replicas=REPLICAS)
    made[A].replicas.set_isr_eligible(EPOCHS)
    yield made
    for node in made.values():
        node.close()


async def replica_fetch(leader: Node, follower: Node, max_wait_ms: int = 0) -> FetchResult:
    (result,) = await leader.replicas.fetch(
        items=[item(follower)],
        max_wait_ms=max_wait_ms,
        min_bytes=1,
        max_bytes=1 << 20,
        replica_id=follower.broker_id,
        replica_epoch=EPOCHS[follower.broker_id],
    )
    return result


def append(follower: Node, result: FetchResult) -> None:
    follower.partition().append_as_follower(
        result.records,
        leader_high_watermark=result.high_watermark,
        leader_log_start_offset=result.log_start_offset,
        now_ms=follower.clock.wall_ms(),
    )


async def test_a_parked_produce_is_answered_one_turn_after_the_hw_advance(
    nodes: dict[int, Node],
) -> None:
    a, b, c = nodes[A], nodes[B], nodes[C]
    parked = asyncio.create_task(a.produce([b"x"], acks=-1, timeout_ms=10_000))
    await asyncio.sleep(0)  # appended and parked
    for follower in (b, c):
        append(follower, await replica_fetch(a, follower))
    await replica_fetch(a, b)  # B reports LEO 1: not enough, C is in the ISR too
    await asyncio.sleep(0)
    assert not parked.done()
    await replica_fetch(a, c)  # C reports LEO 1: the HW advances inside this call
    assert a.partition().log.high_watermark == 1
    await asyncio.sleep(0)
    assert parked.done()
    assert parked.result().error_code == ErrorCode.NONE


async def test_a_parked_follower_fetch_wakes_one_turn_after_the_append(
    nodes: dict[int, Node],
) -> None:
    a, b = nodes[A], nodes[B]
    waiting = asyncio.create_task(replica_fetch(a, b, max_wait_ms=10_000))
    await asyncio.sleep(0)  # parked: nothing to fetch
    assert not waiting.done()
    await a.produce([b"x"], acks=1)
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert waiting.done()
    assert waiting.result().records


async def test_a_parked_fetch_times_out_with_an_empty_answer(nodes: dict[int, Node]) -> None:
    a, b = nodes[A], nodes[B]
    result = await asyncio.wait_for(replica_fetch(a, b, max_wait_ms=20), 5)
    assert result.error_code == ErrorCode.NONE
    assert result.records == b""


async def test_a_parked_produce_times_out_and_leaves_no_waiter(nodes: dict[int, Node]) -> None:
    a = nodes[A]
    result = await asyncio.wait_for(a.produce([b"x"], acks=-1, timeout_ms=20), 5)
    assert result.error_code == ErrorCode.REQUEST_TIMED_OUT
    assert result.indefinite
    assert a.partition()._parked == []
