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
import time
from collections.abc import Callable
from typing import Any, cast

import pytest

from client.errors import CommitFailedError, StaleMemberEpochError
from client.group_offsets import CoordinatorLink, GroupOffsets, MemberIdentity
from client.records import OffsetAndMetadata, TopicPartition
from client.subscription import SubscriptionState
from client.transport import BrokerConnections, ClientPorts
from minikafka.errors import ErrorCode, MiniKafkaError
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
    coordinator: FakeCoordinator,
    identity: MemberIdentity,
    *,
    heartbeat_brings: int | None,
    heartbeat_alive: bool = True,
    request_timeout_ms: int = 300,
    clock_s: Callable[[], float] = time.monotonic,
) -> tuple[GroupOffsets, list[int]]:
    """GroupOffsets on `coordinator`; asking for a heartbeat schedules its answer, which
    brings epoch `heartbeat_brings` (None: the heartbeat brings nothing new);
    `heartbeat_alive=False`: no heartbeat will come (the consumer is closing)."""
    conn = BrokerConnections(
        "127.0.0.1:1",
        request_timeout_ms=request_timeout_ms,
        retry_backoff_ms=1,
        ports=ClientPorts(
            stub_factory=lambda _address: cast(
                "broker_pb2_grpc.BrokerServiceAsyncStub", coordinator
            ),
            clock_s=clock_s,
        ),
    )
    asked: list[int] = []

    def heartbeat_now() -> bool:
        asked.append(identity.epoch)
        if heartbeat_alive and heartbeat_brings is not None:
            asyncio.get_running_loop().call_soon(identity.update, heartbeat_brings, True)
        return heartbeat_alive

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
    offsets, asked = offsets_of(coordinator, identity, heartbeat_brings=None)
    with pytest.raises(CommitFailedError, match="STALE_MEMBER_EPOCH"):
        await offsets.commit({TP: OffsetAndMetadata(50)})
    assert coordinator.committed[TP] == 42
    assert coordinator.sent_epochs == [5]
    assert asked == [5]


#: A guard far below the request timeout of the "no wait" cases: they must fail at once.
NO_WAIT_GUARD_S = 5.0
LONG_TIMEOUT_MS = 60_000


async def test_a_member_that_left_meanwhile_is_not_retried() -> None:
    coordinator = FakeCoordinator(epoch=6)
    identity = joined_at(5)
    offsets, asked = offsets_of(
        coordinator, identity, heartbeat_brings=6, request_timeout_ms=LONG_TIMEOUT_MS
    )
    original = coordinator.OffsetFetch

    async def left_while_on_its_way(request: Any, **call: Any) -> Any:
        identity.update(0, False)  # left or fenced
        return await original(request, **call)

    coordinator.OffsetFetch = left_while_on_its_way  # type: ignore[method-assign]
    with pytest.raises(StaleMemberEpochError):
        async with asyncio.timeout(NO_WAIT_GUARD_S):
            await offsets.fetch_committed([TP])
    assert coordinator.sent_epochs == [5]
    assert asked == []


async def test_no_wait_when_no_heartbeat_will_come() -> None:
    """close(): the heartbeat task is cancelled before the final auto-commit; a stale
    answer then fails at once instead of waiting out the request timeout."""
    coordinator = FakeCoordinator(epoch=6)
    identity = joined_at(5)
    offsets, asked = offsets_of(
        coordinator,
        identity,
        heartbeat_brings=6,
        heartbeat_alive=False,
        request_timeout_ms=LONG_TIMEOUT_MS,
    )
    with pytest.raises(CommitFailedError, match="STALE_MEMBER_EPOCH"):
        async with asyncio.timeout(NO_WAIT_GUARD_S):
            await offsets.commit({TP: OffsetAndMetadata(50)})
    assert coordinator.sent_epochs == [5]
    assert asked == [5]


async def test_a_commit_is_not_sent_again_after_the_member_gave_partitions_up() -> None:
    """The application's commit is on its way at epoch 5; its next poll applies a
    revocation of the partition (which lets the coordinator give it to another member
    once reported); the heartbeat brings epoch 6. Sent again at 6, the commit would
    overwrite the new owner's position: it fails instead (Kafka's commitSync too)."""
    coordinator = FakeCoordinator(epoch=6)
    identity = joined_at(5)
    offsets, _ = offsets_of(coordinator, identity, heartbeat_brings=6)
    original = coordinator.OffsetCommit

    async def revoked_while_on_its_way(request: Any, **call: Any) -> Any:
        identity.released()
        return await original(request, **call)

    coordinator.OffsetCommit = revoked_while_on_its_way  # type: ignore[method-assign]
    with pytest.raises(CommitFailedError, match="STALE_MEMBER_EPOCH"):
        await offsets.commit({TP: OffsetAndMetadata(50)})
    assert coordinator.committed[TP] == 42
    assert coordinator.sent_epochs == [5]


async def test_fenced_and_joined_again_during_the_wait() -> None:
    """While the member waits for its next epoch it is fenced (partitions lost) and
    joins again at epoch 6: the commit of the old incarnation is not sent as the new
    one's; a lookup is (it changes nothing)."""
    coordinator = FakeCoordinator(epoch=6)
    identity = joined_at(5)
    offsets, _ = offsets_of(coordinator, identity, heartbeat_brings=None)

    def fenced_then_rejoined() -> bool:
        loop = asyncio.get_running_loop()
        loop.call_soon(identity.update, 0, False)
        loop.call_soon(identity.update, 6, True)
        return True

    offsets._heartbeat_now = fenced_then_rejoined
    with pytest.raises(CommitFailedError, match="STALE_MEMBER_EPOCH"):
        await offsets.commit({TP: OffsetAndMetadata(50)})
    assert coordinator.committed[TP] == 42
    coordinator.sent_epochs.clear()
    identity.update(5, True)
    assert await offsets.fetch_committed([TP]) == {TP: OffsetAndMetadata(42, "", -1)}
    assert coordinator.sent_epochs == [5, 6]


async def test_the_retries_are_bounded_when_the_epoch_keeps_moving() -> None:
    coordinator = FakeCoordinator(epoch=100)  # every heartbeat brings a still-old epoch
    identity = joined_at(5)
    conn_offsets, _ = offsets_of(coordinator, identity, heartbeat_brings=None)
    moving = iter(range(6, 100))

    def heartbeat_now() -> bool:
        asyncio.get_running_loop().call_soon(identity.update, next(moving), True)
        return True

    conn_offsets._heartbeat_now = heartbeat_now
    with pytest.raises(StaleMemberEpochError):
        await conn_offsets.fetch_committed([TP])
    assert coordinator.sent_epochs == [5, 6, 7, 8]


class LoadingCoordinator(FakeCoordinator):
    """A coordinator still loading its offsets: every lookup is refused as retriable."""

    async def OffsetFetch(self, request: Any, **_call: Any) -> Any:
        self.sent_epochs.append(request.member_epoch)
        return broker_pb2.OffsetFetchResponse(
            error_code=int(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS), error_message="loading"
        )


async def test_the_request_deadline_is_read_on_the_connections_clock() -> None:
    """Retries stop when the client's clock (`ClientPorts.clock_s`, virtual in the
    simulator) passes the request timeout, not the process's monotonic clock: here each
    reading of the clock moves it 20 s on, so a 60 s timeout ends after a few attempts."""
    coordinator = LoadingCoordinator(epoch=5)
    readings: list[float] = []

    def clock_s() -> float:
        readings.append(len(readings) * 20.0)
        return readings[-1]

    offsets, _asked = offsets_of(
        coordinator,
        joined_at(5),
        heartbeat_brings=None,
        request_timeout_ms=LONG_TIMEOUT_MS,
        clock_s=clock_s,
    )
    with pytest.raises(MiniKafkaError, match="COORDINATOR_LOAD_IN_PROGRESS"):
        await asyncio.wait_for(offsets.fetch_committed([TP]), NO_WAIT_GUARD_S)
    assert 1 <= len(coordinator.sent_epochs) <= 3
