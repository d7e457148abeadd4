"""The follower fetcher against in-memory leaders: which answers it may apply.

Issue 14, hole 4: a fetch from a leader that keeps other partitions comes back after a
LeaderAndIsr moved one of them to another leader (or a newer epoch). Its answer for that
partition describes another leader's log and must be dropped, not appended.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from broker.log.errors import InconsistentEpochError
from broker.metadata_cache import BrokerInfo
from broker.replica.fetcher import FetcherSettings, ReplicaFetcher
from broker.replica.follower_fetch import FetchPosition, response_applies
from minikafka.record_batch import build_batch, stamp
from tests.support.inproc import InMemoryLeader, ManualClock, Node

A, B, F = 1, 2, 3
REPLICAS = (A, B, F)

# ---- the pure rule ------------------------------------------------------------------------

SENT = FetchPosition(leader_id=A, leader_epoch=1, fetch_offset=10)


@pytest.mark.parametrize(
    ("current", "applies"),
    [
        pytest.param(SENT, True, id="same leader, epoch and offset"),
        pytest.param(None, False, id="no longer a follower"),
        pytest.param(
            FetchPosition(leader_id=B, leader_epoch=2, fetch_offset=10), False, id="new leader"
        ),
        pytest.param(
            FetchPosition(leader_id=A, leader_epoch=3, fetch_offset=10),
            False,
            id="same leader, newer epoch (A -> B -> A)",
        ),
        pytest.param(
            FetchPosition(leader_id=A, leader_epoch=1, fetch_offset=7),
            False,
            id="log truncated meanwhile",
        ),
    ],
)
def test_an_answer_applies_only_at_the_position_it_was_asked_from(
    current: FetchPosition | None, applies: bool
) -> None:
    assert response_applies(SENT, current) is applies


# ---- the fetcher, driven through the schedule ----------------------------------------------


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def nodes(tmp_path: Path, clock: ManualClock) -> Iterator[dict[int, Node]]:
    made = {b: Node(b, tmp_path / f"broker-{b}", clock) for b in REPLICAS}
    yield made
    for node in made.values():
        node.close()


def settings(clock: ManualClock) -> FetcherSettings:
    return FetcherSettings(
        broker_id=F,
        max_wait_ms=0,
        max_bytes=1 << 20,
        partition_max_bytes=1 << 20,
        backoff_ms=10,
        broker_epoch=lambda: 1,
        now_ms=clock.wall_ms,
    )


@pytest.fixture
async def running() -> AsyncIterator[list[asyncio.Task[None]]]:
    tasks: list[asyncio.Task[None]] = []
    yield tasks
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def test_an_answer_from_the_old_leader_after_a_fail_over_is_dropped(
    nodes: dict[int, Node], clock: ManualClock, running: list[asyncio.Task[None]]
) -> None:
    """Two partitions led by A; F's fetch for both is in flight when partition 0 moves to
    B in epoch 2. A's answer for partition 0 (A's epoch-1 records) must not be appended."""
    a, b, f = nodes[A], nodes[B], nodes[F]
    for index in (0, 1):
        for node in (a, b, f):
            node.apply(leader=A, leader_epoch=1, isr=REPLICAS, replicas=REPLICAS, index=index)
    assert (await a.produce([b"a%d" % i for i in range(10)])).error_code == 0
    old_leader = InMemoryLeader(a)
    old_leader.hold()
    fetcher = ReplicaFetcher(BrokerInfo(broker_id=A, host="a", port=1), settings(clock), old_leader)
    fetcher.set_partitions({("t", 0): f.partition(0), ("t", 1): f.partition(1)})
    running.append(asyncio.create_task(fetcher.run()))
    await asyncio.wait_for(old_leader.arrived.wait(), 5)  # served by A, answer held

    # Fail-over of partition 0 only: B leads it in epoch 2; A keeps partition 1.
    for node in (a, b, f):
        node.apply(leader=B, leader_epoch=2, isr=(B, F), replicas=REPLICAS, index=0)
    fetcher.set_partitions({("t", 1): f.partition(1)})  # what FetcherManager.sync does
    await old_leader.release()
    await asyncio.wait_for(old_leader.arrived.wait(), 5)  # the next fetch: the first was handled

    partition = f.partition(0)
    assert partition.log.log_end_offset == 0, "an answer from the old leader was appended"
    assert partition.log.epoch_cache.entries() == []


async def test_an_answer_from_before_a_reelection_of_the_same_leader_is_dropped(
    nodes: dict[int, Node], clock: ManualClock, running: list[asyncio.Task[None]]
) -> None:
    """A -> B -> A while F's fetch from A (epoch 1) is in flight: leader id matches again,
    the epoch does not. The epoch-1 answer is dropped."""
    a, b, f = nodes[A], nodes[B], nodes[F]
    for node in (a, b, f):
        node.apply(leader=A, leader_epoch=1, isr=REPLICAS, replicas=REPLICAS)
    assert (await a.produce([b"old"] * 4)).error_code == 0
    old_leader = InMemoryLeader(a)
    old_leader.hold()
    fetcher = ReplicaFetcher(BrokerInfo(broker_id=A, host="a", port=1), settings(clock), old_leader)
    fetcher.set_partitions({("t", 0): f.partition(0)})
    running.append(asyncio.create_task(fetcher.run()))
    await asyncio.wait_for(old_leader.arrived.wait(), 5)
    old_leader.arrived.clear()

    for node in (a, b, f):
        node.apply(leader=B, leader_epoch=2, isr=(B, F), replicas=REPLICAS)
    for node in (a, b, f):
        node.apply(leader=A, leader_epoch=3, isr=(A, B, F), replicas=REPLICAS)
    await old_leader.release()
    await asyncio.wait_for(old_leader.arrived.wait(), 5)

    assert f.partition(0).log.log_end_offset == 0, "an answer from epoch 1 was applied in 3"


def test_a_follower_append_of_an_older_epoch_than_the_log_holds_is_refused(
    nodes: dict[int, Node],
) -> None:
    """Defence in depth: even if a stale answer got through, the log never rewrites its
    epoch cache backwards (that silently dropped newer entries)."""
    f = nodes[F]
    f.apply(leader=A, leader_epoch=5, isr=REPLICAS, replicas=REPLICAS)
    log = f.partition(0).log
    log.append_as_follower(
        stamp(build_batch([(1, None, b"new", None)]), base_offset=0, leader_epoch=5), now_ms=1
    )
    with pytest.raises(InconsistentEpochError, match="leader epoch 4"):
        log.append_as_follower(
            stamp(build_batch([(1, None, b"stale", None)]), base_offset=1, leader_epoch=4),
            now_ms=1,
        )
    assert log.log_end_offset == 1
    assert [(e.epoch, e.start_offset) for e in log.epoch_cache.entries()] == [(5, 0)]
