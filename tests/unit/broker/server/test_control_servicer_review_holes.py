"""Adversarial review of issues 14/15 on the real control servicer (findings, strict
xfail): a delayed control request from the current controller."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.metadata_cache import MetadataCache
from broker.replica.state import LeaderState
from broker.server.control_servicer import ControlServicer
from minikafka.errors import ErrorCode
from minikafka.v1 import broker_pb2
from tests.support.inproc import ManualClock, Node, item

CONTROLLER_EPOCH = 3
BROKER_EPOCH = 8


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    made = Node(1, tmp_path / "broker-1", ManualClock())
    yield made
    made.close()


def leader_and_isr(*, min_isr: str, partition_epoch: int, metadata_offset: int = 0) -> Any:
    """A LeaderAndIsr as the dispatcher builds it at send time: the partition's state and
    its topic's configs as the controller had them then."""
    return broker_pb2.LeaderAndIsrRequest(
        controller_id=0,
        controller_epoch=CONTROLLER_EPOCH,
        broker_epoch=BROKER_EPOCH,
        partitions=[
            broker_pb2.PartitionState(
                topic="t",
                partition=0,
                leader=1,
                leader_epoch=7,
                isr=[1, 2, 3],
                partition_epoch=partition_epoch,
                replicas=[1, 2, 3],
            )
        ],
        topic_configs=[
            broker_pb2.TopicConfigs(topic="t", configs={"min.insync.replicas": min_isr})
        ],
        metadata_offset=metadata_offset,
    )


def update_metadata(*, min_isr: str, metadata_offset: int) -> Any:
    return broker_pb2.UpdateMetadataRequest(
        controller_id=0,
        controller_epoch=CONTROLLER_EPOCH,
        broker_epoch=BROKER_EPOCH,
        metadata_offset=metadata_offset,
        topic_configs=[
            broker_pb2.TopicConfigs(topic="t", configs={"min.insync.replicas": min_isr})
        ],
    )


async def test_a_delayed_leader_and_isr_never_rolls_topic_configs_back(node: Node) -> None:
    """`ControlServicer.LeaderAndIsr` applies the request's `topic_configs` before, and
    independently of, its partitions: a partition state older than the one applied is
    ignored (leader and partition epochs), an UpdateMetadata older than the metadata
    applied is ignored (`metadata_offset`), but a LeaderAndIsr carries no offset and its
    configs always win. The dispatcher builds each attempt at send time and, after a
    DEADLINE_EXCEEDED, sends a new attempt and then the next operations; the first
    attempt, held by a slow or delaying link (the one-way delay nemesis of issue 14),
    can still be delivered afterwards within the same controller epoch, and gRPC gives
    the server the full timeout from when it arrives. Schedule: attempt 1 of a
    LeaderAndIsr (min.insync.replicas=2) is held; the operator raises the minimum to 3;
    attempt 2 (min 3) and an UpdateMetadata (min 3) are applied; attempt 1 arrives: the
    leader is back on min 2 until the next config-carrying request, which may never
    come. Meanwhile the controller populates the ELR under min 3 while this leader's HW
    advances on 2 replicas: the schedule of
    `test_raising_min_insync_replicas_makes_a_lagging_replica_eligible`, for an unbounded
    time; a rolled-back flush.policy likewise undoes the fsync the controller counts on.
    Fix: carry the metadata offset the configs were read at in LeaderAndIsr (or send
    configs only in UpdateMetadata) and apply them only when not older than the
    metadata's.

    Fixed: LeaderAndIsr carries `metadata_offset` and the broker keeps each topic's
    configs with the offset they came at (`MetadataCache.topic_config_offsets`)."""
    metadata = MetadataCache()
    node.topic_configs = metadata.topic_configs  # the broker resolves settings from here
    servicer = ControlServicer(
        replicas=node.replicas,
        metadata=metadata,
        broker_epoch=lambda: BROKER_EPOCH,
        session_controller_epoch=lambda: CONTROLLER_EPOCH,
        on_change=lambda: None,
    )
    # attempt 1 (built at offset 30), delayed; attempt 2 built after the change (offset 41)
    held = leader_and_isr(min_isr="2", partition_epoch=9, metadata_offset=30)
    retried = leader_and_isr(min_isr="3", partition_epoch=9, metadata_offset=41)
    reply = await servicer.LeaderAndIsr(retried, None)  # type: ignore[arg-type]
    assert reply.error_code == ErrorCode.NONE
    updated = await servicer.UpdateMetadata(
        update_metadata(min_isr="3", metadata_offset=40),
        None,  # type: ignore[arg-type]
    )
    assert updated.error_code == ErrorCode.NONE
    leader = node.partition().state
    assert isinstance(leader, LeaderState)
    assert leader.min_insync_replicas == 3

    reply = await servicer.LeaderAndIsr(held, None)  # type: ignore[arg-type]
    assert reply.partitions[0].error_code == ErrorCode.NONE  # the partition: already applied
    leader = node.partition().state
    assert isinstance(leader, LeaderState)
    assert leader.min_insync_replicas == 3, "the delayed request rolled min.insync.replicas back"


def partition_state(*, leader_epoch: int, partition_epoch: int) -> Any:
    return broker_pb2.PartitionState(
        topic="t",
        partition=0,
        leader=1,
        leader_epoch=leader_epoch,
        isr=[1, 2],
        partition_epoch=partition_epoch,
        replicas=[1, 2],
    )


def control(partition: Any) -> Any:
    return broker_pb2.LeaderAndIsrRequest(
        controller_id=0,
        controller_epoch=CONTROLLER_EPOCH,
        broker_epoch=BROKER_EPOCH,
        partitions=[partition],
    )


async def follow(leader: Node, follower: Node) -> None:
    """One replica fetch of `follower` from `leader`, handled as `ReplicaFetcher` does."""
    (result,) = await leader.replicas.fetch(
        items=[item(follower)],
        max_wait_ms=0,
        min_bytes=0,
        max_bytes=1 << 20,
        replica_id=follower.broker_id,
        replica_epoch=20,
    )
    assert result.error_code == ErrorCode.NONE, result.error_message
    if result.diverging_epoch is not None:
        follower.partition().truncate_on_divergence(*result.diverging_epoch)
        return
    follower.partition().append_as_follower(
        result.records,
        leader_high_watermark=result.high_watermark,
        leader_log_start_offset=result.log_start_offset,
        now_ms=follower.clock.wall_ms(),
    )


@pytest.mark.xfail(
    strict=True,
    reason="hole: a delayed StopReplica(delete) of a deleted topic deletes the replica of "
    "the re-created topic (fenced by leader epoch only, which starts again at 0)",
)
async def test_a_delayed_stop_replica_of_a_deleted_topic_spares_the_recreated_one(
    node: Node, tmp_path: Path
) -> None:
    """`ReplicaManager.stop_replica` refuses a StopReplica only when its leader epoch is
    below the replica's; a re-created topic of the same name starts again at leader
    epoch 0, so a StopReplica(delete) for the deleted topic (leader epoch 5) that a
    delaying link delivers late, within the same controller epoch and broker
    incarnation, deletes the new topic's log. Schedule: "t" (leader epoch 5) is deleted;
    the dispatcher's first StopReplica attempt to broker 1 is held, the retry deletes
    the log; "t" is created again with broker 1 leading (epoch 0) and broker 2
    following; 5 acks=all records are committed on both. The held StopReplica arrives:
    broker 1 deletes the log and stops serving, the controller knows nothing of it. The
    next LeaderAndIsr for the partition (any ISR change, a controller fail-over's full
    sync) makes broker 1 leader again with an empty log, and broker 2, whose fetch
    diverges, truncates to 0: every acknowledged record is gone without an unclean
    election. Fix: topic identity (KIP-516 topic ids in StopReplica and in the
    partition directory), or at least fence StopReplica by the partition epoch and a
    per-topic incarnation (e.g. the metadata offset of the topic's creation)."""
    follower = Node(2, tmp_path / "broker-2", node.clock)
    try:
        servicer = ControlServicer(
            replicas=node.replicas,
            metadata=MetadataCache(),
            broker_epoch=lambda: BROKER_EPOCH,
            session_controller_epoch=lambda: CONTROLLER_EPOCH,
            on_change=lambda: None,
        )
        old = partition_state(leader_epoch=5, partition_epoch=7)
        assert (await servicer.LeaderAndIsr(control(old), None)).error_code == 0  # type: ignore[arg-type]
        stop = broker_pb2.StopReplicaRequest(
            controller_id=0,
            controller_epoch=CONTROLLER_EPOCH,
            broker_epoch=BROKER_EPOCH,
            partitions=[
                broker_pb2.StopReplicaPartition(
                    topic="t", partition=0, leader_epoch=5, delete_partition=True
                )
            ],
        )
        # "t" is deleted: the retried attempt is applied, the first one is held.
        assert (await servicer.StopReplica(stop, None)).error_code == 0  # type: ignore[arg-type]
        assert ("t", 0) not in node.replicas.partitions

        # "t" is created again: broker 1 leads in epoch 0, broker 2 follows.
        new = partition_state(leader_epoch=0, partition_epoch=0)
        assert (await servicer.LeaderAndIsr(control(new), None)).error_code == 0  # type: ignore[arg-type]
        follower.apply(leader=1, leader_epoch=0, partition_epoch=0, isr=(1, 2), replicas=(1, 2))
        node.replicas.set_isr_eligible({1: BROKER_EPOCH, 2: 20})
        produce = asyncio.create_task(node.produce([b"v%d" % i for i in range(5)], acks=-1))
        await asyncio.sleep(0)
        await follow(node, follower)
        await follow(node, follower)  # learns the HW
        assert (await produce).error_code == ErrorCode.NONE  # acknowledged
        assert follower.partition().log.log_end_offset == 5

        # The held StopReplica of the deleted topic arrives.
        await servicer.StopReplica(stop, None)  # type: ignore[arg-type]
        # Any later change of the partition reaches broker 1 again.
        later = partition_state(leader_epoch=0, partition_epoch=1)
        await servicer.LeaderAndIsr(control(later), None)  # type: ignore[arg-type]
        if ("t", 0) in node.replicas.partitions:
            await follow(node, follower)
        assert follower.partition().log.log_end_offset == 5, (
            "the acknowledged records were truncated away"
        )
        assert node.partition().log.log_end_offset == 5, "the leader's log was deleted"
    finally:
        follower.close()
