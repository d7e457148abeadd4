"""Committed offsets in __consumer_offsets, with real processes: FindCoordinator creates the
topic on first use, commits are acknowledged only once replicated, and they survive the
coordinator's broker being killed (fail-over replays the partition on the new leader) and
restarted. Checked through the raw wire API."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from minikafka.errors import ErrorCode
from minikafka.record_batch import build_batch
from minikafka.v1 import broker_pb2, broker_pb2_grpc, controller_pb2
from tests.support.cluster import Cluster, running_cluster, wait_until
from tests.support.processes import ServerProcess, free_port, standalone_broker_process

pytestmark = pytest.mark.integration

GROUP = "billing"
TOPIC = "orders"
#: Answers that mean "ask again": the coordinator is loading, moving or not elected yet.
TRANSIENT = {
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_COORDINATOR,
}


class Brokers(Protocol):
    def stub(self, broker_id: int | None = None) -> broker_pb2_grpc.BrokerServiceStub: ...


def find_coordinator(cluster: Brokers, group: str) -> broker_pb2.Coordinator:
    def ask() -> broker_pb2.Coordinator | None:
        try:
            reply = cluster.stub().FindCoordinator(
                broker_pb2.FindCoordinatorRequest(group_ids=[group]), timeout=10
            )
        except grpc.RpcError:
            return None
        [found] = reply.coordinators
        if found.error_code in TRANSIENT:
            return None
        assert found.error_code == ErrorCode.NONE, found.error_message
        return found

    return wait_until(ask, what=f"the coordinator of {group}")


def commit(cluster: Brokers, offsets: dict[int, int], *, leader_epoch: int = 0) -> int:
    """Commit through whichever broker coordinates now; returns its id."""

    def attempt() -> int | None:
        coordinator = find_coordinator(cluster, GROUP)
        request = broker_pb2.OffsetCommitRequest(group_id=GROUP, member_id="", member_epoch=-1)
        for partition, offset in offsets.items():
            request.partitions.add(
                topic=TOPIC, partition=partition, offset=offset, leader_epoch=leader_epoch
            )
        try:
            reply = cluster.stub(coordinator.node_id).OffsetCommit(request, timeout=15)
        except grpc.RpcError:
            return None
        if reply.error_code in TRANSIENT:
            return None
        assert reply.error_code == ErrorCode.NONE, reply.error_message
        assert [p.error_code for p in reply.partitions] == [0] * len(offsets)
        return coordinator.node_id

    return wait_until(attempt, what="an acknowledged commit")


def committed(cluster: Brokers) -> dict[int, tuple[int, int]]:
    """partition -> (offset, leader epoch) as the current coordinator answers."""

    def attempt() -> dict[int, tuple[int, int]] | None:
        coordinator = find_coordinator(cluster, GROUP)
        try:
            reply = cluster.stub(coordinator.node_id).OffsetFetch(
                broker_pb2.OffsetFetchRequest(group_id=GROUP, member_id="", member_epoch=-1),
                timeout=10,
            )
        except grpc.RpcError:
            return None
        if reply.error_code in TRANSIENT:
            return None
        assert reply.error_code == ErrorCode.NONE, reply.error_message
        return {
            p.partition: (p.offset, p.leader_epoch) for p in reply.partitions if p.topic == TOPIC
        }

    return wait_until(attempt, what="committed offsets")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with running_cluster(tmp_path, broker_args=["--offsets-topic-num-partitions", "3"]) as running:
        running.create_topic(TOPIC, partitions=2)
        yield running


def test_commits_survive_coordinator_kill_and_restart(cluster: Cluster) -> None:
    first = commit(cluster, {0: 5, 1: 7}, leader_epoch=1)
    assert commit(cluster, {0: 9}, leader_epoch=2) == first
    assert committed(cluster) == {0: (9, 2), 1: (7, 1)}

    # The internal topic was made as the issue says: RF 3 (three brokers), min ISR 2.
    described = cluster.stub().Metadata(
        broker_pb2.MetadataRequest(topics=["__consumer_offsets"]), timeout=5
    )
    [topic] = described.topics
    assert len(topic.partitions) == 3
    assert {len(p.replicas) for p in topic.partitions} == {3}
    assert topic.configs["min.insync.replicas"] == "2"

    cluster.brokers[first].kill()
    # Another broker takes over the partition and replays it.
    assert committed(cluster) == {0: (9, 2), 1: (7, 1)}
    second = commit(cluster, {1: 12}, leader_epoch=3)
    assert second != first

    cluster.brokers[first].start()
    cluster.wait_active(3)
    assert committed(cluster) == {0: (9, 2), 1: (12, 3)}


def test_standalone_coordinator_restart_replays_its_log(tmp_path: Path) -> None:
    """One broker coordinates everything: after kill -9 and a restart the same broker
    rebuilds the offsets from its own log, the last commit of each partition winning."""
    process = standalone_broker_process(
        tmp_path / "broker-1", extra=["--offsets-topic-num-partitions", "2"]
    ).start()
    single = SingleBroker(process)
    try:
        single.create_topic()
        commit(single, {0: 5, 1: 7}, leader_epoch=1)
        commit(single, {0: 9}, leader_epoch=1)
        process.kill()
        process.start()
        assert committed(single) == {0: (9, 1), 1: (7, 1)}
        commit(single, {1: 8}, leader_epoch=1)
        assert committed(single) == {0: (9, 1), 1: (8, 1)}
    finally:
        single.close()
        if process.alive():
            process.terminate()


class SingleBroker:
    """The two `Cluster` methods the helpers above use, for one standalone broker."""

    def __init__(self, process: ServerProcess) -> None:
        self.process = process
        self.channels: dict[str, grpc.Channel] = {}

    def stub(self, broker_id: int | None = None) -> broker_pb2_grpc.BrokerServiceStub:
        address = self.process.address  # a restart may have had to move the port
        if address not in self.channels:
            self.channels[address] = grpc.insecure_channel(address)
        return broker_pb2_grpc.BrokerServiceStub(self.channels[address])

    def close(self) -> None:
        for channel in self.channels.values():
            channel.close()

    def create_topic(self) -> None:
        request = controller_pb2.CreateTopicsRequest()
        request.topics.add(name=TOPIC, num_partitions=2, replication_factor=1)
        reply = self.stub().CreateTopics(request, timeout=10)
        assert reply.topics[0].error_code == ErrorCode.NONE, reply.topics[0].error_message


def test_refusals(cluster: Cluster) -> None:
    coordinator = commit(cluster, {0: 1})
    other = next(b for b in cluster.brokers if b != coordinator)
    stub = cluster.stub(other)
    request = broker_pb2.OffsetCommitRequest(group_id=GROUP, member_epoch=-1)
    request.partitions.add(topic=TOPIC, partition=0, offset=3)
    assert stub.OffsetCommit(request, timeout=10).error_code == ErrorCode.NOT_COORDINATOR
    fetch = broker_pb2.OffsetFetchRequest(group_id=GROUP, member_epoch=-1)
    assert stub.OffsetFetch(fetch, timeout=10).error_code == ErrorCode.NOT_COORDINATOR

    right = cluster.stub(coordinator)
    member = broker_pb2.OffsetCommitRequest(group_id=GROUP, member_id="m-1", member_epoch=4)
    member.partitions.add(topic=TOPIC, partition=0, offset=3)
    reply = right.OffsetCommit(member, timeout=10)
    assert (reply.error_code, reply.partitions[0].error_code) == (
        ErrorCode.UNKNOWN_MEMBER_ID,
        ErrorCode.UNKNOWN_MEMBER_ID,
    )
    assert committed(cluster) == {0: (1, 0)}  # the refused commit wrote nothing

    unknown = broker_pb2.OffsetFetchRequest(group_id="nobody", member_epoch=-1)
    unknown.partitions.add(topic=TOPIC, partition=0)
    nobody = find_coordinator(cluster, "nobody")
    answer = cluster.stub(nobody.node_id).OffsetFetch(unknown, timeout=10)
    assert (answer.error_code, [(p.offset, p.leader_epoch) for p in answer.partitions]) == (
        ErrorCode.NONE,
        [(-1, -1)],
    )

    empty = broker_pb2.FindCoordinatorRequest(group_ids=[""])
    assert right.FindCoordinator(empty, timeout=5).coordinators[0].error_code == (
        ErrorCode.INVALID_GROUP_ID
    )
    bad = broker_pb2.OffsetCommitRequest(group_id=GROUP, member_epoch=-1)
    bad.partitions.add(topic=TOPIC, partition=0, offset=-5)
    with pytest.raises(grpc.RpcError) as raised:
        right.OffsetCommit(bad, timeout=5)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "offset and partition must be >= 0" in (raised.value.details() or "")
    long = broker_pb2.OffsetCommitRequest(group_id=GROUP, member_epoch=-1)
    long.partitions.add(topic=TOPIC, partition=0, offset=1, metadata="x" * 4097)
    with pytest.raises(grpc.RpcError) as too_long:
        right.OffsetCommit(long, timeout=5)
    assert too_long.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "offset.metadata.max.bytes" in (too_long.value.details() or "")


def test_group_metrics(tmp_path: Path) -> None:
    """The coordinator's gauges: groups, members, lag against the local high watermark."""
    port = free_port()
    process = standalone_broker_process(
        tmp_path / "broker-1",
        extra=["--offsets-topic-num-partitions", "1", "--metrics-listen", f"127.0.0.1:{port}"],
    ).start()
    single = SingleBroker(process)
    try:
        single.create_topic()
        produce = broker_pb2.ProduceRequest(acks=-1, timeout_ms=10_000)
        produce.partitions.add(
            topic=TOPIC,
            partition=0,
            records=build_batch([(0, None, f"r{i}".encode(), None) for i in range(5)]),
            current_leader_epoch=-1,
        )
        assert single.stub().Produce(produce, timeout=10).partitions[0].error_code == 0
        stub = single.stub()
        wait_until(lambda: find_coordinator(single, GROUP), what="coordinator")
        join = broker_pb2.ConsumerGroupHeartbeatRequest(
            group_id=GROUP, member_id="m-1", member_epoch=0
        )
        join.subscribed_topics.topics.append(TOPIC)

        def joined() -> broker_pb2.ConsumerGroupHeartbeatResponse | None:
            reply = stub.ConsumerGroupHeartbeat(join, timeout=10)
            return reply if reply.error_code == ErrorCode.NONE else None

        member = wait_until(joined, what="a member")
        commit_request = broker_pb2.OffsetCommitRequest(
            group_id=GROUP, member_id="m-1", member_epoch=member.member_epoch
        )
        commit_request.partitions.add(topic=TOPIC, partition=0, offset=2)
        assert stub.OffsetCommit(commit_request, timeout=10).error_code == ErrorCode.NONE

        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as page:
            samples = {
                (s.name, tuple(sorted(s.labels.items()))): s.value
                for family in text_string_to_metric_families(page.read().decode())
                for s in family.samples
            }
        assert samples[("minikafka_group_count", ())] == 1
        assert samples[("minikafka_group_members", (("group", GROUP),))] == 1
        lag_key = (("group", GROUP), ("partition", "0"), ("topic", TOPIC))
        assert samples[("minikafka_group_lag_offsets", lag_key)] == 3
        assert samples[("minikafka_group_rebalances_total", ())] >= 1
    finally:
        single.close()
        if process.alive():
            process.terminate()


def offsets_log_range(single: SingleBroker, partition: int = 0) -> tuple[int, int]:
    """(log start, log end) of a `__consumer_offsets` partition, from its leader."""
    ends = []
    for timestamp_ms in (-2, -1):  # EARLIEST, LATEST
        reply = single.stub().ListOffsets(
            broker_pb2.ListOffsetsRequest(
                partitions=[
                    broker_pb2.ListOffsetsPartition(
                        topic="__consumer_offsets",
                        partition=partition,
                        timestamp_ms=timestamp_ms,
                        current_leader_epoch=-1,
                    )
                ]
            ),
            timeout=10,
        )
        [answer] = reply.partitions
        assert answer.error_code == ErrorCode.NONE, answer.error_message
        ends.append(int(answer.offset))
    return ends[0], ends[1]


def test_compaction_keeps_the_offsets_log_bounded_and_replays_the_same(tmp_path: Path) -> None:
    """With a low compaction threshold, 60 commits of two keys leave a log of a few
    records (a snapshot and what came after), whose replay after kill -9 gives the last
    commit of each partition."""
    process = standalone_broker_process(
        tmp_path / "broker-1",
        extra=[
            "--offsets-topic-num-partitions",
            "1",
            "--offsets-compaction-min-records",
            "20",
        ],
    ).start()
    single = SingleBroker(process)
    try:
        single.create_topic()
        for n in range(60):
            commit(single, {n % 2: n}, leader_epoch=1)
        assert committed(single) == {0: (58, 1), 1: (59, 1)}

        def compacted() -> tuple[int, int] | None:
            start, end = offsets_log_range(single)
            return (start, end) if start > 0 else None

        start, end = wait_until(compacted, what="the offsets log compacted")
        # 60 commit records plus two (one per live key) for each snapshot; the replayed
        # part is below the threshold, not 60 records long.
        assert end > 60
        assert end - start < 20, f"log start {start}, end {end}: not bounded"
        # kill -9 may come before the log start offset was checkpointed: the log then
        # replays from an older start, through the snapshots, to the same offsets.
        process.kill()
        process.start()
        assert committed(single) == {0: (58, 1), 1: (59, 1)}
        # A clean shutdown checkpoints it: the restarted broker replays from the snapshot.
        commit(single, {0: 61}, leader_epoch=1)
        start, _ = wait_until(compacted, what="the offsets log compacted again")
        process.terminate()
        process.start()
        assert offsets_log_range(single)[0] == start
        assert committed(single) == {0: (61, 1), 1: (59, 1)}
        commit(single, {1: 60}, leader_epoch=1)
        assert committed(single) == {0: (61, 1), 1: (60, 1)}
    finally:
        single.close()
        if process.alive():
            process.terminate()
