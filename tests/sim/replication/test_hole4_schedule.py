"""The exact schedule by which hole 4 (stale fetch answers, issue 17) loses acknowledged
records, driven step by step on in-process replicas (`tests.support.inproc`), with the
fix on and with it switched off (`unsafe_stale_answers`, the canary's switch).

A leads partitions 0 and 1 (epoch 1); F follows both through one fetcher, B lags on
partition 0. F's fetch from A at offset 5 is answered with A's records 5..7 (epoch 1,
never committed: B lacks them) and that answer is held on the link. Partition 0 moves to
B (epoch 2; A keeps partition 1, so F's fetcher from A lives on): F truncates to B's log
(2), fetches B's epoch-2 records 2..4, which A and F acknowledge (B's HW 5). Then the
held answer arrives while F's log end is again 5: before the fix F appends it and its
epoch cache drops epoch 2 (older batch, newer entries removed), so its next fetch from B
(offset 8, last epoch 1) is told to diverge at B's end of epoch 1 and truncates to 2,
below the HW. If B fails before F's next fetch repairs it and F is elected, B's
committed records 2..4 are gone from the new leader.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import msgspec
import pytest

from broker.metadata_cache import BrokerInfo
from broker.replica.fetcher import FetcherSettings, ReplicaFetcher
from broker.replica.manager import ReplicaManager
from minikafka.errors import ErrorCode
from tests.support.inproc import InMemoryLeader, ManualClock, Node, item

A, B, F = 1, 2, 3
REPLICAS = (A, B, F)


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[dict[int, Node]]:
    clock = ManualClock()
    made = {b: Node(b, tmp_path / f"broker-{b}", clock) for b in REPLICAS}
    yield made
    for node in made.values():
        node.close()


@pytest.fixture
async def running() -> AsyncIterator[list[asyncio.Task[None]]]:
    tasks: list[asyncio.Task[None]] = []
    yield tasks
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def sync(follower: Node, leader: Node, index: int = 0) -> None:
    """One follower fetch of partition `index`, answered at once and applied as the
    fetcher applies it (a divergence truncates, records append)."""
    (result,) = await leader.replicas.fetch(
        items=[item(follower, index)],
        max_wait_ms=0,
        min_bytes=0,
        max_bytes=1 << 20,
        replica_id=follower.broker_id,
    )
    assert result.error_code is ErrorCode.NONE, result
    partition = follower.partition(index)
    if result.diverging_epoch is not None:
        partition.truncate_on_divergence(*result.diverging_epoch)
        return
    partition.append_as_follower(
        result.records,
        leader_high_watermark=result.high_watermark,
        leader_log_start_offset=result.log_start_offset,
        now_ms=follower.clock.wall_ms(),
    )


async def produce_one_by_one(node: Node, count: int, tag: bytes) -> None:
    for number in range(count):
        assert (await node.produce([tag + b"%d" % number])).error_code is ErrorCode.NONE


@pytest.mark.parametrize(
    ("unsafe", "after_stale", "after_next_fetch"),
    [(False, 5, 5), (True, 8, 2)],
    ids=["fix", "no-fix"],
)
async def test_a_stale_answer_at_the_log_end_truncates_committed_records(
    nodes: dict[int, Node],
    running: list[asyncio.Task[None]],
    unsafe: bool,
    after_stale: int,
    after_next_fetch: int,
) -> None:
    a, b, f = nodes[A], nodes[B], nodes[F]
    f.config = msgspec.structs.replace(f.config, unsafe_test_apply_stale_fetch_answers=unsafe)
    f.replicas = ReplicaManager(
        config=f.config, logs=f.logs, clock=f.clock, topic_configs=lambda topic: {}
    )
    for index in (0, 1):
        for node in (a, b, f):
            node.apply(leader=A, leader_epoch=1, isr=REPLICAS, replicas=REPLICAS, index=index)
    await produce_one_by_one(a, 2, b"a")
    for _ in range(2):
        await sync(b, a)
        await sync(f, a)
    assert a.partition(0).log.high_watermark == 2
    await produce_one_by_one(a, 3, b"u")  # 2..4: F fetches them, B lags
    await sync(f, a)
    await produce_one_by_one(a, 3, b"v")  # 5..7: what the held answer carries
    assert (f.partition(0).log.log_end_offset, a.partition(0).log.high_watermark) == (5, 2)

    old_leader = InMemoryLeader(a)
    old_leader.hold()
    settings = FetcherSettings(
        broker_id=F,
        max_wait_ms=0,
        max_bytes=1 << 20,
        partition_max_bytes=1 << 20,
        backoff_ms=10,
        broker_epoch=lambda: 1,
        now_ms=f.clock.wall_ms,
        unsafe_stale_answers=unsafe,
    )
    fetcher = ReplicaFetcher(BrokerInfo(broker_id=A, host="a", port=1), settings, old_leader)
    fetcher.set_partitions({("t", 0): f.partition(0), ("t", 1): f.partition(1)})
    running.append(asyncio.create_task(fetcher.run()))
    await asyncio.wait_for(old_leader.arrived.wait(), 5)
    old_leader.arrived.clear()

    # Partition 0 moves to B (a preferred election); A keeps partition 1.
    for node in (a, b, f):
        node.apply(leader=B, leader_epoch=2, isr=REPLICAS, replicas=REPLICAS, index=0)
    fetcher.set_partitions({("t", 1): f.partition(1)})
    await sync(f, b)  # diverges at B's end of epoch 1: truncate to 2
    await sync(a, b)
    assert f.partition(0).log.log_end_offset == 2
    await produce_one_by_one(b, 3, b"b")  # 2..4 in epoch 2
    for _ in range(2):
        await sync(a, b)
        await sync(f, b)
    assert b.partition(0).log.high_watermark == 5  # committed: A and F hold 2..4
    assert f.partition(0).log.log_end_offset == 5

    await old_leader.release()  # the held answer: A's epoch-1 records 5..7
    await asyncio.wait_for(old_leader.arrived.wait(), 5)  # applied; the next fetch is out
    assert f.partition(0).log.log_end_offset == after_stale
    await sync(f, b)  # F's next fetch from B
    # Before the fix F appended 5..7 (epoch 1) and lost its epoch-2 entry: B's answer
    # (diverging at its end of epoch 1) cut F to 2, below B's HW of 5.
    assert f.partition(0).log.log_end_offset == after_next_fetch

    # B fails before F fetches again; F is elected (A could be too) and B, back, follows.
    for node in (a, b, f):
        node.apply(leader=F, leader_epoch=3, isr=(A, F), replicas=REPLICAS, index=0)
    await sync(b, f)
    await sync(b, f)
    # The records B committed at 2..4 survive only with the fix.
    assert b.partition(0).log.log_end_offset == after_next_fetch
