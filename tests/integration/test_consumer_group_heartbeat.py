"""KIP-848 membership on a real cluster, through the raw wire API: three members over six
partitions join, one leaves, one goes silent and is fenced by its session timeout. After
every heartbeat no two members own one partition (a member keeps what it was told to give
up until its next heartbeat acknowledges it); once settled every partition is owned. Offset
commits are fenced by member epoch."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from minikafka.errors import ErrorCode
from minikafka.v1 import broker_pb2, broker_pb2_grpc
from tests.support.cluster import Cluster, running_cluster, wait_until

pytestmark = pytest.mark.integration

GROUP = "pipeline"
TOPIC = "events"
EVERYTHING = {(TOPIC, p) for p in range(6)}
SESSION_TIMEOUT_MS = 1_500


class WireMember:
    """A member as a consumer would run it, one heartbeat at a time."""

    def __init__(self, stub: broker_pb2_grpc.BrokerServiceStub, member_id: str) -> None:
        self.stub = stub
        self.member_id = member_id
        self.epoch = 0
        self.owned: set[tuple[str, int]] = set()
        self.revoking: set[tuple[str, int]] = set()

    def heartbeat(self, *, join: bool = False) -> broker_pb2.ConsumerGroupHeartbeatResponse:
        # Finish giving up what the last answer took away, then report what is left.
        self.owned -= self.revoking
        self.revoking = set()
        request = broker_pb2.ConsumerGroupHeartbeatRequest(
            group_id=GROUP,
            member_id=self.member_id,
            member_epoch=0 if join else self.epoch,
            server_assignor="range",
            rebalance_timeout_ms=10_000,
        )
        if join:
            request.subscribed_topics.topics.append(TOPIC)
        request.owned.SetInParent()
        for topic, partition in sorted(self.owned):
            request.owned.partitions.add(topic=topic, partition=partition)
        reply = self.stub.ConsumerGroupHeartbeat(request, timeout=10)
        assert reply.error_code == ErrorCode.NONE, reply.error_message
        assert reply.heartbeat_interval_ms > 0
        self.epoch = reply.member_epoch
        assigned = {(p.topic, p.partition) for p in reply.assignment.partitions}
        self.revoking = self.owned - assigned
        self.owned |= assigned
        return reply

    def leave(self) -> None:
        reply = self.stub.ConsumerGroupHeartbeat(
            broker_pb2.ConsumerGroupHeartbeatRequest(
                group_id=GROUP, member_id=self.member_id, member_epoch=-1
            ),
            timeout=10,
        )
        assert (reply.error_code, reply.member_epoch) == (ErrorCode.NONE, -1)
        self.owned, self.revoking = set(), set()


def check_disjoint(members: list[WireMember]) -> None:
    seen: dict[tuple[str, int], str] = {}
    for member in members:
        for tp in member.owned:
            assert tp not in seen, f"{tp} owned by {seen[tp]} and {member.member_id}"
            seen[tp] = member.member_id


def settle(members: list[WireMember]) -> None:
    """Heartbeat round after round until nobody's assignment changes (bounded)."""
    for _ in range(10):
        before = [(m.epoch, frozenset(m.owned)) for m in members]
        for member in members:
            member.heartbeat()
            check_disjoint(members)
        if [(m.epoch, frozenset(m.owned)) for m in members] == before and not any(
            m.revoking for m in members
        ):
            return
    raise AssertionError("the group did not settle in 10 rounds")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    args = [
        "--offsets-topic-num-partitions",
        "1",
        "--group-consumer-session-timeout-ms",
        str(SESSION_TIMEOUT_MS),
        "--group-consumer-heartbeat-interval-ms",
        "300",
    ]
    with running_cluster(tmp_path, broker_args=args) as running:
        running.create_topic(TOPIC, partitions=6)
        yield running


def coordinator_stub(cluster: Cluster) -> broker_pb2_grpc.BrokerServiceStub:
    """The coordinator's stub, once it has loaded its partition."""

    def ready() -> broker_pb2_grpc.BrokerServiceStub | None:
        try:
            reply = cluster.stub().FindCoordinator(
                broker_pb2.FindCoordinatorRequest(group_ids=[GROUP]), timeout=10
            )
            found = reply.coordinators[0]
            if found.error_code != ErrorCode.NONE:
                return None
            stub = cluster.stub(found.node_id)
            probe = broker_pb2.OffsetFetchRequest(group_id=GROUP, member_epoch=-1)
            loaded = stub.OffsetFetch(probe, timeout=10).error_code == ErrorCode.NONE
        except grpc.RpcError:  # a broker that was just killed
            return None
        return stub if loaded else None

    return wait_until(ready, what="the coordinator to load its partition")


def test_members_join_leave_and_are_fenced(cluster: Cluster) -> None:
    stub = coordinator_stub(cluster)
    a, b, c = (WireMember(stub, f"member-{name}") for name in "abc")
    members = [a, b, c]

    a.heartbeat(join=True)
    assert a.owned == EVERYTHING

    # b joins: a must give up half before b gets anything (revoke before assign).
    b.heartbeat(join=True)
    assert b.owned == set()
    a.heartbeat()
    assert a.revoking == {(TOPIC, p) for p in (3, 4, 5)}
    check_disjoint(members)
    b.heartbeat()
    assert b.owned == set()  # a has not acknowledged yet
    settle([a, b])
    assert (a.owned, b.owned) == ({(TOPIC, p) for p in (0, 1, 2)}, {(TOPIC, p) for p in (3, 4, 5)})

    c.heartbeat(join=True)
    settle(members)
    assert [len(m.owned) for m in members] == [2, 2, 2]
    assert a.owned | b.owned | c.owned == EVERYTHING

    # Offset commits carry the member epoch.
    good = broker_pb2.OffsetCommitRequest(
        group_id=GROUP, member_id=a.member_id, member_epoch=a.epoch
    )
    good.partitions.add(topic=TOPIC, partition=0, offset=10)
    assert stub.OffsetCommit(good, timeout=10).error_code == ErrorCode.NONE
    stale = broker_pb2.OffsetCommitRequest(
        group_id=GROUP, member_id=a.member_id, member_epoch=a.epoch - 1
    )
    stale.partitions.add(topic=TOPIC, partition=0, offset=11)
    assert stub.OffsetCommit(stale, timeout=10).error_code == ErrorCode.STALE_MEMBER_EPOCH
    outsider = broker_pb2.OffsetCommitRequest(group_id=GROUP, member_epoch=-1)
    outsider.partitions.add(topic=TOPIC, partition=0, offset=12)
    assert stub.OffsetCommit(outsider, timeout=10).error_code == ErrorCode.UNKNOWN_MEMBER_ID

    # b leaves: a and c share its partitions.
    b.leave()
    settle([a, c])
    assert (len(a.owned), len(c.owned), a.owned | c.owned) == (3, 3, EVERYTHING)

    # c goes silent: its session expires and a ends up with everything.
    def a_owns_everything() -> bool:
        a.heartbeat()
        return a.owned == EVERYTHING and not a.revoking

    wait_until(a_owns_everything, timeout_s=SESSION_TIMEOUT_MS / 1000 + 10, what="c fenced")
    fenced = broker_pb2.ConsumerGroupHeartbeatRequest(
        group_id=GROUP, member_id=c.member_id, member_epoch=c.epoch
    )
    assert stub.ConsumerGroupHeartbeat(fenced, timeout=10).error_code == (
        ErrorCode.UNKNOWN_MEMBER_ID
    )


def test_refused_heartbeats(cluster: Cluster) -> None:
    stub = coordinator_stub(cluster)
    join = broker_pb2.ConsumerGroupHeartbeatRequest(
        group_id=GROUP, member_id="x", member_epoch=0, server_assignor="sticky"
    )
    join.subscribed_topics.topics.append(TOPIC)
    reply = stub.ConsumerGroupHeartbeat(join, timeout=10)
    assert reply.error_code == ErrorCode.UNSUPPORTED_ASSIGNOR
    assert "'sticky' is not one of ['range', 'uniform']" in reply.error_message
    unknown = broker_pb2.ConsumerGroupHeartbeatRequest(
        group_id=GROUP, member_id="y", member_epoch=3
    )
    assert (
        stub.ConsumerGroupHeartbeat(unknown, timeout=10).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    )
    no_group = broker_pb2.ConsumerGroupHeartbeatRequest(member_id="y", member_epoch=0)
    assert stub.ConsumerGroupHeartbeat(no_group, timeout=10).error_code == (
        ErrorCode.INVALID_GROUP_ID
    )


def test_members_survive_a_coordinator_change(cluster: Cluster) -> None:
    """Membership is written to __consumer_offsets: after the coordinator's broker is
    killed, the new coordinator knows the members, their epochs and their partitions."""
    stub = coordinator_stub(cluster)
    a, b = WireMember(stub, "member-a"), WireMember(stub, "member-b")
    a.heartbeat(join=True)
    b.heartbeat(join=True)
    settle([a, b])
    epochs, owned = (a.epoch, b.epoch), (set(a.owned), set(b.owned))

    first = find_node(cluster)
    cluster.brokers[first].kill()
    wait_until(lambda: find_node(cluster) != first, what="a new coordinator")
    new_stub = coordinator_stub(cluster)
    for member in (a, b):
        member.stub = new_stub
        reply = member.heartbeat()  # asserts NONE: not UNKNOWN_MEMBER_ID
        assert reply.member_epoch == epochs[(a, b).index(member)]
    assert (a.owned, b.owned) == owned
    check_disjoint([a, b])

    # The group goes on from there: b leaves, a gets everything.
    b.leave()
    settle([a])
    assert a.owned == EVERYTHING


def find_node(cluster: Cluster) -> int:
    def ask() -> int | None:
        try:
            reply = cluster.stub().FindCoordinator(
                broker_pb2.FindCoordinatorRequest(group_ids=[GROUP]), timeout=10
            )
        except grpc.RpcError:
            return None
        found = reply.coordinators[0]
        return found.node_id if found.error_code == ErrorCode.NONE else None

    return wait_until(ask, what="the group coordinator")
