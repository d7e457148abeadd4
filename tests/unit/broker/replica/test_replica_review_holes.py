"""Adversarial review of issues 14/15 on the real replica layer (findings, strict xfail).

The broker half of the controller findings in
`tests/unit/controller/test_controller_review_holes.py`: what a real `Partition` does
when a topic config that the controller's safety rules depend on changes under it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.log.errors import LogStorageError
from minikafka.errors import ErrorCode
from minikafka.record_batch import decode_rows, iter_batches
from tests.support.inproc import TOPIC, ManualClock, Node, item

A, B = 1, 2


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


async def replicate(leader: Node, follower: Node, *, broker_epoch: int) -> None:
    """One replica fetch of `follower` from `leader`, applied as the fetcher would."""
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


def values(node: Node) -> list[bytes | None]:
    """The values of every record in `node`'s log of partition 0, in offset order."""
    records = node.partition().log.read(0, max_bytes=1 << 20).records
    found: list[bytes | None] = []
    for position, header in iter_batches(records):
        _, rows = decode_rows(bytes(records[position : position + header.size]))
        found.extend(row.value for row in rows)
    return found


@pytest.mark.xfail(
    strict=True,
    reason="hole: a replica of a deleted topic that missed its StopReplica is adopted by the "
    "re-created topic of the same name and counts towards acks=all",
)
async def test_a_stale_replica_of_a_deleted_topic_never_counts_for_the_recreated_one(
    tmp_path: Path,
) -> None:
    """The controller sends StopReplica(delete) for a deleted topic only to brokers that
    are live then (`propagation.plan_propagation`, `Dispatcher.submit(live=...)`); a broker
    that is down keeps the log, and when it returns UpdateMetadata's `deleted_topics`
    drops only metadata (`ControlServicer.UpdateMetadata`). Topic names are the only
    identity (no topic id), the broker ignores LeaderAndIsr's `is_new`, and a re-created
    topic starts again at leader epoch 0, so the stale log is adopted as the replica of
    the new topic. Schedule: "t" on A (leader) and B; 10 records replicated to B; B goes
    down; "t" is deleted (A deletes its log) and created again on A and B; B returns
    with its old log. 10 acks=all records are produced on A; B's fetch (offset 10, last
    fetched epoch 0) matches A's epoch 0, which ends at 10, so there is no divergence:
    A counts B as holding offsets 0..9, the HW reaches 10 and the producer is told
    "committed". B holds none of them (it holds the deleted topic's records at those
    offsets); if A fails, B leads cleanly and the acknowledged records are gone (the
    replicas silently disagree on every offset). Fix: give topics an identity (Kafka's
    topic id, KIP-516) stored in the partition directory and sent in LeaderAndIsr, and
    delete (or refuse) a log whose topic id differs; at least, honour `is_new` by
    emptying an existing log, and have the broker delete logs of topics the metadata
    lists as deleted."""
    clock = ManualClock()
    a = Node(A, tmp_path / "broker-1", clock)
    b = Node(B, tmp_path / "broker-2", clock)
    try:
        epochs = {A: 10, B: 20}
        for node in (a, b):  # the first topic "t"
            node.apply(leader=A, leader_epoch=0, isr=(A, B), replicas=(A, B))
        a.replicas.set_isr_eligible(epochs)
        assert (await a.produce([b"old-%d" % i for i in range(10)])).error_code == 0
        await replicate(a, b, broker_epoch=20)
        assert values(b) == [b"old-%d" % i for i in range(10)]

        b.close()  # B is down while "t" is deleted: only A gets the StopReplica
        assert a.replicas.stop_replica(TOPIC, 0, leader_epoch=-2, delete=True) == 0
        b = Node(B, tmp_path / "broker-2", clock)  # B returns with the deleted topic's log
        epochs[B] = 21

        for node in (a, b):  # "t" is created again: leader epoch 0, ISR {A, B}
            node.apply(leader=A, leader_epoch=0, isr=(A, B), replicas=(A, B))
        a.replicas.set_isr_eligible(epochs)
        produce = asyncio.create_task(a.produce([b"new-%d" % i for i in range(10)], acks=-1))
        await asyncio.sleep(0)  # appended on A, parked for replication
        await replicate(a, b, broker_epoch=21)
        assert (await produce).error_code == 0  # acknowledged: "committed"
        assert a.partition().log.high_watermark == 10

        assert values(b) == values(a), "B is counted in sync holding other records"
    finally:
        a.close()
        b.close()


async def test_a_failure_after_the_append_is_answered_indefinite(
    node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`Partition.append_as_leader` appends the batch (LEO advanced, producer state
    updated) and only then, for flush.policy=fsync, flushes the log (and may write a
    producer snapshot after a roll). When that raises `LogStorageError` (EIO, ENOSPC),
    `ReplicaManager.produce` answers KAFKA_STORAGE_ERROR without `indefinite`, the
    client's policy takes it as "not written" (it is not a post-append code), and the
    partition stays leader: followers replicate the batch, the HW passes it, consumers
    read it. With retries=0 the producer reports a definite failure for a record that is
    in the log; with retries a non-idempotent producer writes it again (the error is
    retriable), each time "definitely" failed. Issue 14 hole 3's rule: every answer given
    after the broker may have appended is indefinite. Fix: in `produce`, mark any error
    raised after `log.append_as_leader` returned as indefinite (e.g. split the append
    from the flush and catch around the latter), or take the partition offline (the
    KAFKA_STORAGE_ERROR path) so that the unflushed batch is never served.

    Fixed: `Partition.append_as_leader` answers any failure after the log end moved as
    `FailedAfterAppendError` (same code), which `produce` marks indefinite."""
    follower = Node(B, tmp_path / "broker-2", node.clock)
    try:
        for each in (node, follower):
            each.topic_configs[TOPIC] = {"flush.policy": "fsync"}
            each.apply(leader=A, leader_epoch=0, isr=(A, B), replicas=(A, B))
        node.replicas.set_isr_eligible({A: 10, B: 20})
        log = node.partition().log

        def failing_flush() -> None:
            raise LogStorageError("fsync failed: [Errno 5] Input/output error")

        monkeypatch.setattr(log, "flush", failing_flush)
        result = await node.produce([b"maybe"], acks=1)
        assert result.error_code is ErrorCode.KAFKA_STORAGE_ERROR
        monkeypatch.undo()

        await replicate(node, follower, broker_epoch=20)  # the batch is served ...
        await replicate(node, follower, broker_epoch=20)
        assert values(follower) == [b"maybe"]
        assert log.high_watermark == 1  # ... and committed
        assert result.indefinite, "a committed record was answered as definitely not written"
    finally:
        follower.close()


async def test_a_follower_whose_fsync_failed_never_counts_the_unflushed_batch(
    node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """flush.policy=fsync promises "fsync every record before it counts towards the high
    watermark", and the controller relies on it: a replica of such a topic that restarts
    without proof keeps its ISR membership (`_replica_loss`). `Partition.
    append_as_follower` appends, then flushes; when the flush raises, `ReplicaFetcher`
    logs it and backs off, but the batch stays in the log (LEO advanced, not fsynced) and
    the next fetch asks from the new LEO, which the leader records as the follower's
    progress: the HW passes a record the follower never fsynced, and a power loss of the
    follower (kept in the ISR as intact) loses a committed record. Fix: on a failed
    fsync take the replica offline (Kafka marks the log directory offline on an I/O
    error), or truncate back to the recovery point before fetching again.

    Fixed: `Partition.append_as_follower` truncates the unflushed batch away before it
    raises, so the next fetch asks for it again."""
    follower = Node(B, tmp_path / "broker-2", node.clock)
    try:
        for each in (node, follower):
            each.topic_configs[TOPIC] = {"flush.policy": "fsync"}
            each.apply(leader=A, leader_epoch=0, isr=(A, B), replicas=(A, B))
        node.replicas.set_isr_eligible({A: 10, B: 20})
        assert (await node.produce([b"v"], acks=1)).error_code is ErrorCode.NONE
        flog = follower.partition().log

        def failing_flush() -> None:
            raise LogStorageError("fsync failed: [Errno 5] Input/output error")

        monkeypatch.setattr(flog, "flush", failing_flush)
        with pytest.raises(LogStorageError):  # ReplicaFetcher._handle logs it, backs off
            await replicate(node, follower, broker_epoch=20)
        monkeypatch.undo()
        assert flog.log_end_offset == 0  # the unflushed batch is dropped ...
        assert flog.recovery_point == 0

        await replicate(node, follower, broker_epoch=20)  # ... and fetched again from 0
        assert flog.log_end_offset == 1
        hw = node.partition().log.high_watermark
        assert flog.recovery_point >= hw, (
            f"the leader's HW {hw} counts a record the follower never fsynced"
        )
    finally:
        follower.close()
