"""Adversarial review of issues 14/15 on the real control servicer (findings, strict
xfail): a delayed control request from the current controller."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.metadata_cache import MetadataCache
from broker.replica.state import LeaderState
from broker.server.control_servicer import ControlServicer
from minikafka.errors import ErrorCode
from minikafka.v1 import broker_pb2
from tests.support.inproc import ManualClock, Node

CONTROLLER_EPOCH = 3
BROKER_EPOCH = 8


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    made = Node(1, tmp_path / "broker-1", ManualClock())
    yield made
    made.close()


def leader_and_isr(*, min_isr: str, partition_epoch: int) -> Any:
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


@pytest.mark.xfail(
    strict=True,
    reason="hole: a delayed LeaderAndIsr rolls the broker's topic configs back (its "
    "partitions are fenced by epoch, its topic_configs are not)",
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
    metadata's."""
    metadata = MetadataCache()
    node.topic_configs = metadata.topic_configs  # the broker resolves settings from here
    servicer = ControlServicer(
        replicas=node.replicas,
        metadata=metadata,
        broker_epoch=lambda: BROKER_EPOCH,
        session_controller_epoch=lambda: CONTROLLER_EPOCH,
        on_change=lambda: None,
    )
    held = leader_and_isr(min_isr="2", partition_epoch=9)  # attempt 1, delayed
    retried = leader_and_isr(min_isr="3", partition_epoch=9)  # attempt 2, after the change
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
