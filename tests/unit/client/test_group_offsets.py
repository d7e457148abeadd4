"""A member's commits and committed-offset lookups across a member-epoch change.

The schedule (seen in `test_three_members_join_and_leave`): another member leaves, the
coordinator bumps this member's epoch, and this member sends OffsetFetch or OffsetCommit
with its old epoch before its next heartbeat answer brings the new one. The coordinator
answers STALE_MEMBER_EPOCH; as in Kafka's consumer, the request is sent again with the
epoch the next heartbeat brings (the member asks for that heartbeat at once), and fails
only when no newer epoch arrives within the request timeout.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from client.errors import CommitFailedError, StaleMemberEpochError
from client.group_offsets import CoordinatorLink, GroupOffsets, MemberIdentity
from client.records import OffsetAndMetadata, TopicPartition
from client.subscription import SubscriptionState
from client.transport import BrokerConnections, ClientPorts
from minikafka.errors import ErrorCode
from minikafka.v1 import broker_pb2, broker_pb2_grpc

TP = TopicPartition("t", 0)
GROUP = "g"


class FakeCoordinator:
    """A coordinator that knows the member at `epoch` and answers STALE_MEMBER_EPOCH to
    any other epoch (as the broker's OffsetFetch / OffsetCommit validation does)."""

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch
        self.committed: dict[TopicPartition, int] = {TP: 42}
        self.sent_epochs: list[int] = []

    async def FindCoordinator(self, request: Any, **_call: Any) -> Any:
        reply = broker_pb2.FindCoordinatorResponse()
        reply.coordinators.add(host="127.0.0.1", port=1)
        return reply

    async def OffsetFetch(self, request: Any, **_call: Any) -> Any:
        self.sent_epochs.append(request.member_epoch)
        if request.member_epoch != self.epoch:
            return broker_pb2.OffsetFetchResponse(
                error_code=int(ErrorCode.STALE_MEMBER_EPOCH), error_message="stale"
            )
        reply = broker_pb2.OffsetFetchResponse()
        for p in request.partitions:
            tp = TopicPartition(p.topic, p.partition)
            reply.partitions.add(
                topic=tp.topic,
                partition=tp.partition,
                offset=self.committed.get(tp, -1),
                leader_epoch=-1,
            )
        return reply

    async def OffsetCommit(self, request: Any, **_call: Any) -> Any:
        self.sent_epochs.append(request.member_epoch)
        if request.member_epoch != self.epoch:
            return broker_pb2.OffsetCommitResponse(
                error_code=int(ErrorCode.STALE_MEMBER_EPOCH), error_message="stale"
            )
        for p in request.partitions:
            self.committed[TopicPartition(p.topic, p.partition)] = p.offset
        return broker_pb2.OffsetCommitResponse()


def offsets_of(
    coordinator: FakeCoordinator, identity: MemberIdentity, *, heartbeat_brings: int | None
) -> tuple[GroupOffsets, list[int]]:
    """GroupOffsets on `coordinator`; asking for a heartbeat schedules its answer, which
    brings epoch `heartbeat_brings` (None: the heartbeat brings nothing new)."""
    conn = BrokerConnections(
        "127.0.0.1:1",
        request_timeout_ms=300,
        retry_backoff_ms=1,
        ports=ClientPorts(
            stub_factory=lambda _address: cast(
                "broker_pb2_grpc.BrokerServiceAsyncStub", coordinator
            )
        ),
    )
    asked: list[int] = []

    def heartbeat_now() -> None:
        asked.append(identity.epoch)
        if heartbeat_brings is not None:
            asyncio.get_running_loop().call_soon(identity.update, heartbeat_brings, True)

    offsets = GroupOffsets(
        GROUP,
        identity=identity,
        coordinator=CoordinatorLink(GROUP, conn),
        subscription=SubscriptionState([TP.topic], None),
        heartbeat_now=heartbeat_now,
    )
    return offsets, asked


def joined_at(epoch: int) -> MemberIdentity:
    identity = MemberIdentity()
    identity.update(epoch, True)
    return identity


async def test_lookup_with_an_old_epoch_is_sent_again_with_the_next_one() -> None:
    coordinator = FakeCoordinator(epoch=6)
    identity = joined_at(5)
    offsets, asked = offsets_of(coordinator, identity, heartbeat_brings=6)
    found = await offsets.fetch_committed([TP])
    assert found == {TP: OffsetAndMetadata(42, "", -1)}
    assert coordinator.sent_epochs == [5, 6]
    assert asked == [5]  # one heartbeat asked for, not waited out


async def test_commit_with_an_old_epoch_is_sent_again_with_the_next_one() -> None:
    coordinator = FakeCoordinator(epoch=6)
    identity = joined_at(5)
    offsets, asked = offsets_of(coordinator, identity, heartbeat_brings=6)
    await offsets.commit({TP: OffsetAndMetadata(50)})
    assert coordinator.committed[TP] == 50
    assert coordinator.sent_epochs == [5, 6]
    assert asked == [5]


async def test_lookup_fails_when_no_newer_epoch_arrives_within_the_timeout() -> None:
    coordinator = FakeCoordinator(epoch=6)
    identity = joined_at(5)
    offsets, asked = offsets_of(coordinator, identity, heartbeat_brings=None)
    with pytest.raises(StaleMemberEpochError, match="OffsetFetch"):
        await offsets.fetch_committed([TP])
    assert coordinator.sent_epochs == [5]
    assert asked == [5]


async def test_commit_fails_when_no_newer_epoch_arrives_within_the_timeout() -> None:
    coordinator = FakeCoordinator(epoch=6)
    identity = joined_at(5)
    offsets, _ = offsets_of(coordinator, identity, heartbeat_brings=None)
    with pytest.raises(CommitFailedError, match="STALE_MEMBER_EPOCH"):
        await offsets.commit({TP: OffsetAndMetadata(50)})
    assert coordinator.committed[TP] == 42


async def test_a_member_that_left_meanwhile_is_not_retried() -> None:
    coordinator = FakeCoordinator(epoch=6)
    identity = joined_at(5)
    offsets, _ = offsets_of(coordinator, identity, heartbeat_brings=None)
    asyncio.get_running_loop().call_soon(identity.update, 0, False)  # left / fenced
    with pytest.raises(StaleMemberEpochError):
        await offsets.fetch_committed([TP])
    assert coordinator.sent_epochs == [5]


async def test_the_retries_are_bounded_when_the_epoch_keeps_moving() -> None:
    coordinator = FakeCoordinator(epoch=100)  # every heartbeat brings a still-old epoch
    identity = joined_at(5)
    conn_offsets, _ = offsets_of(coordinator, identity, heartbeat_brings=None)
    moving = iter(range(6, 100))

    def heartbeat_now() -> None:
        asyncio.get_running_loop().call_soon(identity.update, next(moving), True)

    conn_offsets._heartbeat_now = heartbeat_now
    with pytest.raises(StaleMemberEpochError):
        await conn_offsets.fetch_committed([TP])
    assert coordinator.sent_epochs == [5, 6, 7, 8]
