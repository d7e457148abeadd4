"""Consumer groups with the real client on a real cluster: three `Consumer(group_id=...)`
over six partitions while members join and leave. Checked: once the group is stable the
members' assignments are disjoint and cover every partition; the listener sees what was
assigned and revoked; every record is processed at least once by the group; a commit
made by a member that left is where its partitions resume; `committed()` reads it back;
a fenced commit raises `CommitFailedError`; a pattern subscription picks up new topics."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from client import (
    AsyncConsumer,
    Consumer,
    ConsumerRebalanceListener,
    OffsetAndMetadata,
    Producer,
    TopicPartition,
)
from client.errors import CommitFailedError, IllegalStateError, KafkaConfigurationError
from tests.support.cluster import Cluster, running_cluster, wait_until

pytestmark = pytest.mark.integration

TOPIC = "clicks"
GROUP = "analytics"
PARTITIONS = {TopicPartition(TOPIC, p) for p in range(6)}
PER_PARTITION = 50


class Recorder(ConsumerRebalanceListener):
    def __init__(self) -> None:
        self.events: list[tuple[str, frozenset[TopicPartition]]] = []

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.events.append(("assigned", frozenset(assigned)))

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.events.append(("revoked", frozenset(revoked)))


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    args = [
        "--offsets-topic-num-partitions",
        "1",
        "--group-consumer-heartbeat-interval-ms",
        "200",
    ]
    with running_cluster(tmp_path, broker_args=args) as running:
        running.create_topic(TOPIC, partitions=6)
        with Producer(bootstrap_servers=running.bootstrap, acks="all") as producer:
            for partition in range(6):
                for i in range(PER_PARTITION):
                    producer.send(TOPIC, f"{partition}-{i}".encode(), partition=partition)
            producer.flush()
        yield running


def member(cluster: Cluster, listener: Recorder) -> Consumer:
    consumer = Consumer(
        bootstrap_servers=cluster.bootstrap,
        group_id=GROUP,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=6_000,
        max_poll_interval_ms=30_000,
    )
    consumer.subscribe([TOPIC], listener=listener)
    return consumer


def consume_until_stable(
    consumers: list[Consumer], seen: dict[TopicPartition, set[int]], sizes: list[int]
) -> None:
    """Poll every consumer (committing what it processed) until their assignments have
    the expected sizes and together cover every partition."""

    def stable() -> bool:
        for consumer in consumers:
            for tp, records in consumer.poll(timeout_ms=100).items():
                seen.setdefault(tp, set()).update(r.offset for r in records)
            consumer.commit()
        assignments = [consumer.assignment() for consumer in consumers]
        union = set().union(*assignments)
        return sorted(len(a) for a in assignments) == sorted(sizes) and union == PARTITIONS

    wait_until(stable, timeout_s=60, what=f"assignments of sizes {sizes}")
    assignments = [consumer.assignment() for consumer in consumers]
    assert sum(len(a) for a in assignments) == len(PARTITIONS)  # disjoint


def test_three_members_join_and_leave(cluster: Cluster) -> None:
    seen: dict[TopicPartition, set[int]] = {}
    listeners = [Recorder(), Recorder(), Recorder()]
    a = member(cluster, listeners[0])
    try:
        consume_until_stable([a], seen, [6])
        b = member(cluster, listeners[1])
        try:
            consume_until_stable([a, b], seen, [3, 3])
            c = member(cluster, listeners[2])
            consume_until_stable([a, b, c], seen, [2, 2, 2])
            c_had = c.assignment()
            c.commit()
            c_committed = {tp: c.committed(tp) for tp in c_had}
            c.close()  # leaves the group: a and b take over its partitions
            consume_until_stable([a, b], seen, [3, 3])
            # c committed its partitions before leaving; their new owners go on from
            # there, never below (the group's commits only move forward here).
            for tp, offset in c_committed.items():
                assert offset is not None
                now = a.committed(tp)
                assert now is not None
                assert now >= offset
        finally:
            b.close()

        def everything_processed() -> bool:
            for tp, records in a.poll(timeout_ms=100).items():
                seen.setdefault(tp, set()).update(r.offset for r in records)
            a.commit()
            return all(seen.get(tp) == set(range(PER_PARTITION)) for tp in PARTITIONS)

        wait_until(everything_processed, timeout_s=60, what="every record processed")
        assert {tp: a.committed(tp) for tp in PARTITIONS} == dict.fromkeys(
            PARTITIONS, PER_PARTITION
        )
    finally:
        a.close()

    first = listeners[0].events
    assert first[0] == ("assigned", frozenset(PARTITIONS))
    assert ("revoked", frozenset()) not in first
    assert any(kind == "revoked" for kind, _ in first)  # gave partitions to b and c
    assert listeners[2].events[0][0] == "assigned"


def test_commit_rules(cluster: Cluster) -> None:
    listener = Recorder()
    consumer = member(cluster, listener)
    try:
        wait_until(
            lambda: consumer.poll(timeout_ms=100) is not None and consumer.assignment(),
            what="an assignment",
        )
        tp = TopicPartition(TOPIC, 0)
        consumer.commit({tp: OffsetAndMetadata(7, "seven")})
        assert consumer.committed(tp) == 7
        consumer.commit({tp: 9})
        assert consumer.committed(tp) == 9
        with pytest.raises(ValueError, match="must be an int >= 0"):
            consumer.commit({tp: -1})
        future = consumer.commit_async({tp: 11})
        future.result(timeout=30)
        assert consumer.committed(tp) == 11
    finally:
        consumer.close()
    without_group = Consumer(TOPIC, bootstrap_servers=cluster.bootstrap)
    try:
        with pytest.raises(IllegalStateError, match="needs group_id"):
            without_group.commit()
    finally:
        without_group.close()


def test_fenced_commit_raises(cluster: Cluster) -> None:
    consumer = member(cluster, Recorder())
    try:
        wait_until(
            lambda: consumer.poll(timeout_ms=100) is not None and consumer.assignment(),
            what="an assignment",
        )
        inner = consumer._inner._group
        assert inner is not None
        inner.identity.epoch += 5  # as if the coordinator had moved on without this member
        with pytest.raises(CommitFailedError, match="STALE_MEMBER_EPOCH"):
            consumer.commit({TopicPartition(TOPIC, 0): 3})
    finally:
        consumer.close()


def test_pattern_subscription_follows_new_topics(cluster: Cluster) -> None:
    cluster.create_topic("logs-a", partitions=2)
    consumer = Consumer(
        bootstrap_servers=cluster.bootstrap,
        group_id="log-readers",
        auto_offset_reset="earliest",
        metadata_max_age_ms=300,
    )
    try:
        consumer.subscribe(pattern=r"logs-.*")

        def assigned(expected: set[TopicPartition]) -> bool:
            consumer.poll(timeout_ms=100)
            return consumer.assignment() == expected

        logs_a = {TopicPartition("logs-a", p) for p in range(2)}
        wait_until(lambda: assigned(logs_a), what="logs-a assigned")
        assert consumer.subscription() == {"logs-a"}  # not clicks, not __consumer_offsets
        cluster.create_topic("logs-b", partitions=1)
        wait_until(
            lambda: assigned(logs_a | {TopicPartition("logs-b", 0)}), what="logs-b picked up"
        )
        with pytest.raises(KafkaConfigurationError, match="topics or a pattern, not both"):
            consumer.subscribe(["logs-a"], pattern="logs-.*")
        with pytest.raises(KafkaConfigurationError, match="is not a regex"):
            consumer.subscribe(pattern="logs-(")
    finally:
        consumer.close()


def test_async_consumer_commits(cluster: Cluster) -> None:
    async def main() -> None:
        async with AsyncConsumer(
            bootstrap_servers=cluster.bootstrap,
            group_id="async-readers",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        ) as consumer:
            consumer.subscribe([TOPIC])
            async with asyncio.timeout(30):
                while len(consumer.assignment()) < len(PARTITIONS):
                    await consumer.getmany(timeout_ms=100)
            tp = TopicPartition(TOPIC, 0)
            await consumer.commit_async({tp: 4})
            assert await consumer.committed(tp) == 4
            await consumer.commit({tp: OffsetAndMetadata(6, "m")})
            assert await consumer.committed(tp) == 6

    asyncio.run(main())


def test_static_member_gets_its_partitions_back(cluster: Cluster) -> None:
    def static(instance: str, listener: Recorder) -> Consumer:
        consumer = Consumer(
            bootstrap_servers=cluster.bootstrap,
            group_id="static-readers",
            group_instance_id=instance,
            auto_offset_reset="earliest",
            session_timeout_ms=20_000,
        )
        consumer.subscribe([TOPIC], listener=listener)
        return consumer

    seen: dict[TopicPartition, set[int]] = {}
    b_events = Recorder()
    a = static("host-a", Recorder())
    b = static("host-b", b_events)
    try:
        consume_until_stable([a, b], seen, [3, 3])
        a_had, b_had = a.assignment(), b.assignment()
        b_events_before = list(b_events.events)
        a.close()  # a static member leaves temporarily: its partitions wait for it
        a_again = static("host-a", Recorder())
        try:
            consume_until_stable([a_again, b], seen, [3, 3])
            assert (a_again.assignment(), b.assignment()) == (a_had, b_had)
            assert b_events.events == b_events_before  # b saw no rebalance
        finally:
            a_again.close()
    finally:
        b.close()
