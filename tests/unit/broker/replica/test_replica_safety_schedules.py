"""Issue 14's schedules on the real replica layer (in-process brokers, manual clock).

Each test builds one schedule from the outside review step by step with the real
`ReplicaManager` / `Partition` / `PartitionLog` objects and checks the rule that closes it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.replica.isr import AlterPartitionItem
from broker.replica.manager import ListOffsetsItem
from broker.replica.partition import Partition
from broker.replica.state import LeaderState
from minikafka.errors import ErrorCode
from tests.support.inproc import ManualClock, Node, item

A, B, C = 1, 2, 3
REPLICAS = (A, B, C)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def nodes(tmp_path: Path, clock: ManualClock) -> Iterator[dict[int, Node]]:
    made = {b: Node(b, tmp_path / f"broker-{b}", clock) for b in REPLICAS}
    yield made
    for node in made.values():
        node.close()


async def follower_fetch(
    leader: Node, follower: Node, *, broker_epoch: int
) -> list[AlterPartitionItem]:
    """One replica fetch of `follower` from `leader`, appended as the fetcher would; the
    ISR proposals the leader made while recording it."""
    proposals: list[AlterPartitionItem] = []

    def propose(_: Partition, proposal: AlterPartitionItem) -> None:
        proposals.append(proposal)

    leader.replicas.on_isr_proposal = propose
    (result,) = await leader.replicas.fetch(
        items=[item(follower)],
        max_wait_ms=0,
        min_bytes=0,
        max_bytes=1 << 20,
        replica_id=follower.broker_id,
        replica_epoch=broker_epoch,
    )
    assert result.error_code == 0, result.error_message
    assert result.diverging_epoch is None
    follower.partition().append_as_follower(
        result.records,
        leader_high_watermark=result.high_watermark,
        leader_log_start_offset=result.log_start_offset,
        now_ms=follower.clock.wall_ms(),
    )
    return proposals


async def test_kip903_another_followers_fetch_never_readds_a_restarted_broker(
    nodes: dict[int, Node], tmp_path: Path, clock: ManualClock
) -> None:
    """Hole 1. B is caught up, leaves the ISR (fenced), and comes back as a new incarnation
    with a shorter log (power loss). A routine fetch by C must not propose B for the ISR
    on B's previous incarnation's progress; only B's own fetches, from its current
    incarnation, can make it eligible."""
    a, b, c = nodes[A], nodes[B], nodes[C]
    epochs = {A: 10, B: 20, C: 30}
    for node in (a, b, c):
        node.apply(leader=A, leader_epoch=1, isr=REPLICAS, replicas=REPLICAS)
    a.replicas.set_isr_eligible(epochs)
    for i in range(10):  # one record per batch: the power loss below cuts at a batch end
        assert (await a.produce([b"v%d" % i])).error_code == 0
    for follower, epoch in ((b, 20), (c, 30), (b, 20), (c, 30)):
        await follower_fetch(a, follower, broker_epoch=epoch)
    assert a.partition().log.high_watermark == 10

    # The controller fences B: it leaves the ISR (partition epoch 2).
    a.apply(leader=A, leader_epoch=1, partition_epoch=2, isr=(A, C), replicas=REPLICAS)
    # B restarts after a power loss with 4 of its 10 records, as incarnation 21.
    b.close()
    b_log = tmp_path / "broker-2" / "t-0"
    restarted = Node(B, tmp_path / "broker-2", clock)
    nodes[B] = restarted
    restarted.apply(leader=A, leader_epoch=1, partition_epoch=2, isr=(A, C), replicas=REPLICAS)
    restarted.partition().log.truncate_to(4)
    assert b_log.exists()
    assert restarted.partition().log.log_end_offset == 4
    a.replicas.set_isr_eligible({**epochs, B: 21})

    assert await follower_fetch(a, c, broker_epoch=30) == [], "C's fetch proposed re-adding B"
    assert await follower_fetch(a, restarted, broker_epoch=21) == []  # B at 4: below the HW
    # B catches up in its new incarnation: now (and only now) it may join.
    (proposal,) = await follower_fetch(a, restarted, broker_epoch=21)
    assert proposal.new_isr == (A, B, C)
    assert dict(proposal.new_isr_with_epochs)[B] == 21


async def test_kip903_a_zombie_fetch_of_the_old_incarnation_changes_nothing(
    nodes: dict[int, Node],
) -> None:
    """A delayed fetch of B's previous incarnation (epoch 20) arriving after B's new
    incarnation (21) fetched must not overwrite the new incarnation's progress."""
    a, b, c = nodes[A], nodes[B], nodes[C]
    for node in (a, b, c):
        node.apply(leader=A, leader_epoch=1, isr=(A, C), replicas=REPLICAS)
    a.replicas.set_isr_eligible({A: 10, B: 21, C: 30})
    assert (await a.produce([b"v%d" % i for i in range(10)])).error_code == 0
    await follower_fetch(a, b, broker_epoch=21)  # the new incarnation, at 0 (then holds 10)
    before = a.partition().state
    assert isinstance(before, LeaderState)
    zombie = item(b)  # offset 10, as the old incarnation had
    assert zombie.fetch_offset == 10
    await a.replicas.fetch(
        items=[zombie],
        max_wait_ms=0,
        min_bytes=0,
        max_bytes=1 << 20,
        replica_id=B,
        replica_epoch=20,
    )
    after = a.partition().state
    assert isinstance(after, LeaderState)
    assert after.follower(B) == before.follower(B)


async def test_a_parked_produce_that_loses_the_leadership_is_answered_indefinite(
    nodes: dict[int, Node],
) -> None:
    """Hole 3: an acks=all produce waits for replication; the leadership moves. The answer
    NOT_LEADER_OR_FOLLOWER comes after the append, so it is indefinite: the new leader
    may already hold the batch and commit it."""
    a, b, c = nodes[A], nodes[B], nodes[C]
    for node in (a, b, c):
        node.topic_configs["t"] = {"min.insync.replicas": "2"}
        node.apply(leader=A, leader_epoch=1, isr=REPLICAS, replicas=REPLICAS)
    a.replicas.set_isr_eligible({A: 10, B: 20, C: 30})
    parked = asyncio.create_task(a.produce([b"x"], acks=-1, timeout_ms=10_000))
    await asyncio.sleep(0)  # appended and parked
    await follower_fetch(a, b, broker_epoch=20)  # B has the batch: it may be committed
    a.apply(leader=B, leader_epoch=2, isr=(B, C), replicas=REPLICAS)
    result = await asyncio.wait_for(parked, 5)
    assert result.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert result.indefinite


async def test_a_parked_produce_never_completes_in_a_later_epoch_of_the_same_leader(
    nodes: dict[int, Node],
) -> None:
    """Hole 3 / A -> B -> A: the batch waits at offset 0 in epoch 1; A loses the leadership,
    its tail is truncated and offset 0 refilled by another record in epoch 3, when A leads
    again. The HW passing offset 1 then says nothing about the parked batch: it must not be
    acknowledged at offset 0 (which now holds another record)."""
    a, b, c = nodes[A], nodes[B], nodes[C]
    for node in (a, b, c):
        node.apply(leader=A, leader_epoch=1, isr=REPLICAS, replicas=REPLICAS)
    a.replicas.set_isr_eligible({A: 10, B: 20, C: 30})
    parked = asyncio.create_task(a.produce([b"lost"], acks=-1, timeout_ms=10_000))
    await asyncio.sleep(0)
    a.apply(leader=B, leader_epoch=2, isr=(B, C), replicas=REPLICAS)
    a.partition().truncate_on_divergence(0, 0)  # B's answer: A's epoch-1 tail diverges
    assert a.partition().log.log_end_offset == 0
    a.apply(leader=A, leader_epoch=3, isr=REPLICAS, replicas=REPLICAS)
    for node in (b, c):
        node.apply(leader=A, leader_epoch=3, isr=REPLICAS, replicas=REPLICAS)
    assert (await a.produce([b"other"], acks=1)).base_offset == 0
    await follower_fetch(a, b, broker_epoch=20)
    await follower_fetch(a, c, broker_epoch=30)
    await follower_fetch(a, b, broker_epoch=20)
    await follower_fetch(a, c, broker_epoch=30)
    assert a.partition().log.high_watermark == 1
    result = await asyncio.wait_for(parked, 5)
    assert (result.error_code, result.indefinite) == (ErrorCode.NOT_LEADER_OR_FOLLOWER, True)


async def test_the_latest_offset_never_goes_back_across_a_leader_change(
    nodes: dict[int, Node],
) -> None:
    """Hole 6 (KIP-207): A exposes offset 10 as its HW; B has all 10 records but learned
    only HW 8 when A died. B, the new leader, must not answer LATEST = 8 (backwards for a
    client that just saw 10): OFFSET_NOT_AVAILABLE until its HW reaches its epoch start."""
    a, b, c = nodes[A], nodes[B], nodes[C]
    for node in (a, b, c):
        node.apply(leader=A, leader_epoch=1, isr=REPLICAS, replicas=REPLICAS)
    a.replicas.set_isr_eligible({A: 10, B: 20, C: 30})
    for i in range(8):
        assert (await a.produce([b"v%d" % i])).error_code == 0
    for follower, epoch in ((b, 20), (c, 30), (b, 20), (c, 30)):
        await follower_fetch(a, follower, broker_epoch=epoch)  # everyone at 8, HW 8 known
    for i in range(8, 10):
        assert (await a.produce([b"v%d" % i])).error_code == 0
    await follower_fetch(a, b, broker_epoch=20)  # B gets 8..9 with HW 8
    await follower_fetch(a, c, broker_epoch=30)
    await follower_fetch(a, c, broker_epoch=30)  # C at 10
    await a.replicas.fetch(  # B at 10: A's HW is 10 now; the answer to B is lost
        items=[item(b)],
        max_wait_ms=0,
        min_bytes=0,
        max_bytes=1 << 20,
        replica_id=B,
        replica_epoch=20,
    )
    assert latest(a) == (ErrorCode.NONE, 10)  # a client sees 10
    assert b.partition().log.high_watermark == 8  # B learned only 8
    for node in (b, c):
        node.apply(leader=B, leader_epoch=2, isr=(B, C), replicas=REPLICAS)
    b.replicas.set_isr_eligible({B: 20, C: 30})
    assert latest(b)[0] == ErrorCode.OFFSET_NOT_AVAILABLE
    await follower_fetch(b, c, broker_epoch=30)  # C reaches 10: B's HW covers its epoch start
    assert latest(b) == (ErrorCode.NONE, 10)


def latest(node: Node) -> tuple[ErrorCode, int]:
    (result,) = node.replicas.list_offsets(
        [ListOffsetsItem(topic="t", partition=0, timestamp_ms=-1)]
    )
    return result.error_code, result.offset
