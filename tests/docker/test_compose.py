"""The docker-compose cluster for real: build, start, produce/consume from the host, kill the
leader of a partition, and check that a new leader serves and no acknowledged record is lost;
then kill the active controller and check that the quorum's successor still creates a topic
and moves a leader.

Skips (with the reason) where there is no Docker engine or Compose tool; everything it creates
(containers, network, volumes) is removed in `finally`. The base image and the test image stay
as build caches (re-runs take well under a minute of building).
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator

import grpc
import pytest

from client import Consumer, Producer, TopicPartition
from minikafka.errors import ErrorCode
from minikafka.v1 import broker_pb2, broker_pb2_grpc, controller_pb2, raft_pb2
from tests.docker.compose import (
    CLUSTER_SERVICES,
    ComposeProject,
    base_image,
    compose_command,
    docker_unavailable_reason,
)
from tests.support.cluster import wait_until
from tests.support.processes import free_port

pytestmark = [pytest.mark.docker, pytest.mark.timeout(600)]

TOPIC = "orders"
PARTITIONS = 3
RECORDS_BEFORE_KILL = 150
RECORDS_AFTER_KILL = 150
BASE_IMAGE_TIMEOUT_S = 300.0
BUILD_TIMEOUT_S = 240.0
START_TIMEOUT_S = 120.0
FAILOVER_TIMEOUT_S = 60.0


@pytest.fixture(scope="module")
def project() -> Iterator[ComposeProject]:
    reason = docker_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    command = compose_command()
    assert command is not None
    ports = {broker_id: free_port() for broker_id in (1, 2, 3)}
    compose = ComposeProject(command, f"mktest{uuid.uuid4().hex[:10]}", ports)
    python_image = base_image(BASE_IMAGE_TIMEOUT_S)
    compose.build(python_image, BUILD_TIMEOUT_S)
    try:
        with compose.logs_on_failure():
            compose.up(START_TIMEOUT_S)
            compose.wait_healthy(CLUSTER_SERVICES, START_TIMEOUT_S)
        yield compose
    finally:
        compose.down()


class HostView:
    """The cluster as a host client sees it: through the external listeners only."""

    def __init__(self, ports: dict[int, int]) -> None:
        self.ports = ports
        self.channels = {
            broker_id: grpc.insecure_channel(f"127.0.0.1:{port}")
            for broker_id, port in ports.items()
        }

    def close(self) -> None:
        for channel in self.channels.values():
            channel.close()

    def bootstrap(self, *, avoid: int | None = None) -> str:
        return ",".join(f"127.0.0.1:{p}" for b, p in self.ports.items() if b != avoid)

    def stub(self, broker_id: int) -> broker_pb2_grpc.BrokerServiceStub:
        return broker_pb2_grpc.BrokerServiceStub(self.channels[broker_id])

    def metadata(self, via: int) -> broker_pb2.MetadataResponse:
        return self.stub(via).Metadata(broker_pb2.MetadataRequest(topics=[TOPIC]), timeout=5)

    def active_brokers(self, via: int) -> int:
        try:
            reply = self.stub(via).DescribeCluster(
                controller_pb2.DescribeClusterRequest(), timeout=5
            )
        except grpc.RpcError:
            return 0
        return sum(1 for broker in reply.brokers if not broker.fenced)

    def leader(self, partition: int, via: int) -> tuple[int, int]:
        """(leader id, leader epoch) of `partition` in the metadata broker `via` hands out."""
        for topic in self.metadata(via).topics:
            for part in topic.partitions:
                if part.partition == partition:
                    return part.leader, part.leader_epoch
        raise KeyError(partition)

    def serves(self, broker_id: int, partition: int) -> bool:
        """Whether `broker_id` answers ListOffsets for `partition` as its leader."""
        if broker_id not in self.channels:  # -1: no leader
            return False
        try:
            reply = self.stub(broker_id).ListOffsets(
                broker_pb2.ListOffsetsRequest(
                    partitions=[
                        broker_pb2.ListOffsetsPartition(
                            topic=TOPIC,
                            partition=partition,
                            timestamp_ms=-1,
                            current_leader_epoch=-1,
                        )
                    ]
                ),
                timeout=5,
            )
        except grpc.RpcError:
            return False
        return reply.partitions[0].error_code == ErrorCode.NONE


@contextlib.contextmanager
def host_view(project: ComposeProject) -> Iterator[HostView]:
    view = HostView(project.broker_ports)
    try:
        yield view
    finally:
        view.close()


def produce(producer: Producer, start: int, count: int) -> dict[tuple[int, int], bytes]:
    """`count` keyed acks=all records, then one per partition; {(partition, offset): value}."""
    values = [f"value-{n}".encode() for n in range(start, start + count + PARTITIONS)]
    futures = [
        producer.send(TOPIC, value, key=f"key-{index % 17}".encode())
        for index, value in enumerate(values[:count])
    ]
    # Every partition, including the one whose leader is killed, gets records.
    futures += [
        producer.send(TOPIC, value, partition=index) for index, value in enumerate(values[count:])
    ]
    acked: dict[tuple[int, int], bytes] = {}
    for future, value in zip(futures, values, strict=True):
        meta = future.result(timeout=90)
        acked[(meta.partition, meta.offset)] = value
    return acked


def test_host_clients_survive_leader_kill(project: ComposeProject) -> None:
    with project.logs_on_failure(), host_view(project) as view:
        wait_until(
            lambda: view.active_brokers(1) == 3,
            timeout_s=START_TIMEOUT_S,
            interval_s=0.5,
            what="3 active brokers",
        )
        # The advertised-listener problem, solved: metadata from an external listener names
        # every broker by its host-reachable address, not broker-N:9092.
        external = {(b, "127.0.0.1", p) for b, p in project.broker_ports.items()}

        def advertised() -> set[tuple[int, str, int]]:
            return {(b.broker_id, b.host, b.port) for b in view.metadata(1).brokers}

        # (Brokers learn about each other through the controller, a moment after registering.)
        wait_until(lambda: advertised() == external, timeout_s=30, what="all brokers in metadata")
        assert advertised() == external

        created = view.stub(2).CreateTopics(
            controller_pb2.CreateTopicsRequest(
                topics=[
                    controller_pb2.CreatableTopic(
                        name=TOPIC, num_partitions=PARTITIONS, replication_factor=3
                    )
                ]
            ),
            timeout=30,
        )
        assert created.topics[0].error_code == ErrorCode.NONE, created.topics[0].error_message
        for partition in range(PARTITIONS):

            def led(partition: int = partition) -> bool:
                try:
                    leader, _ = view.leader(partition, via=1)
                except (grpc.RpcError, KeyError):  # metadata not propagated yet
                    return False
                return view.serves(leader, partition)

            wait_until(led, timeout_s=30, what=f"a serving leader of {TOPIC}-{partition}")

        with Producer(view.bootstrap(), acks="all", linger_ms=2) as producer:
            acked = produce(producer, 0, RECORDS_BEFORE_KILL)
            victim, epoch = view.leader(0, via=1)
            survivor = next(b for b in project.broker_ports if b != victim)
            project.kill(f"broker-{victim}")
            assert project.state(f"broker-{victim}")["Running"] is False

            def new_leader() -> int | None:
                try:
                    leader, new_epoch = view.leader(0, via=survivor)
                except (grpc.RpcError, KeyError):
                    return None
                if leader in (victim, -1) or new_epoch <= epoch:
                    return None
                return leader if view.serves(leader, 0) else None

            successor = wait_until(
                new_leader,
                timeout_s=FAILOVER_TIMEOUT_S,
                interval_s=0.2,
                what=f"a new leader of {TOPIC}-0 after killing broker {victim}",
            )
            assert successor != victim
            # The same producer keeps working: it finds the new leader through metadata.
            after = produce(producer, RECORDS_BEFORE_KILL + PARTITIONS, RECORDS_AFTER_KILL)
            assert any(partition == 0 for partition, _ in after)
            acked.update(after)

        consumed = consume_all(view.bootstrap(avoid=victim), len(acked))
        lost = sorted(set(acked) - set(consumed))
        assert not lost, f"acknowledged records missing after failover: {lost[:20]}"
        changed = sorted(key for key in acked if consumed[key] != acked[key])
        assert not changed, f"records changed after failover at (partition, offset) {changed[:20]}"
        # The producer is idempotent (acks=all): its retries across the failover add nothing.
        assert len(consumed) == len(acked), sorted(set(consumed) - set(acked))[:20]


def test_active_controller_kill_keeps_metadata_changes_working(project: ComposeProject) -> None:
    """kill -9 of the active controller (a container of the quorum): the other two elect a
    successor, which creates a topic (asked through a broker, which follows the active
    controller) and elects a new leader when a partition leader dies."""
    with project.logs_on_failure(), host_view(project) as view:
        for broker in ("broker-1", "broker-2", "broker-3"):
            if project.state(broker)["Running"] is False:  # the previous test's victim
                project.start(broker, START_TIMEOUT_S)
        wait_until(
            lambda: view.active_brokers(1) == 3,
            timeout_s=START_TIMEOUT_S,
            interval_s=0.5,
            what="3 active brokers",
        )
        before = view.stub(1).DescribeQuorum(raft_pb2.DescribeQuorumRequest(), timeout=10)
        assert before.active
        assert sorted(v.node_id for v in before.voters) == [1, 2, 3]
        project.kill(f"controller-{before.leader_id}")

        def successor() -> raft_pb2.DescribeQuorumResponse | None:
            try:
                reply = view.stub(2).DescribeQuorum(raft_pb2.DescribeQuorumRequest(), timeout=5)
            except grpc.RpcError:
                return None
            return reply if reply.active and reply.leader_id != before.leader_id else None

        after = wait_until(
            successor, timeout_s=FAILOVER_TIMEOUT_S, interval_s=0.2, what="a new active controller"
        )
        assert after.leader_epoch > before.leader_epoch
        created = view.stub(3).CreateTopics(
            controller_pb2.CreateTopicsRequest(
                topics=[
                    controller_pb2.CreatableTopic(
                        name="after-controller-kill", num_partitions=1, replication_factor=3
                    )
                ]
            ),
            timeout=30,
        )
        assert created.topics[0].error_code == ErrorCode.NONE, created.topics[0].error_message

        def known_leader() -> tuple[int, int] | None:
            # Metadata reaches the brokers asynchronously after a controller fail-over (they
            # answer the successor NOT_CONTROLLER until they learn of it): a broker restarted
            # just before the kill may not list the topic yet.
            try:
                leader, leader_epoch = view.leader(0, via=1)
            except (grpc.RpcError, KeyError):
                return None
            return (leader, leader_epoch) if leader >= 0 else None

        victim, epoch = wait_until(
            known_leader,
            timeout_s=FAILOVER_TIMEOUT_S,
            interval_s=0.2,
            what=f"broker 1 to name a leader of {TOPIC}-0",
        )
        survivor = next(b for b in project.broker_ports if b != victim)
        project.kill(f"broker-{victim}")

        def moved() -> int | None:
            try:
                leader, new_epoch = view.leader(0, via=survivor)
            except (grpc.RpcError, KeyError):
                return None
            if leader in (victim, -1) or new_epoch <= epoch:
                return None
            return leader if view.serves(leader, 0) else None

        wait_until(
            moved,
            timeout_s=FAILOVER_TIMEOUT_S,
            interval_s=0.2,
            what=f"a new leader of {TOPIC}-0 elected by the new active controller",
        )


def consume_all(bootstrap: str, expected: int) -> dict[tuple[int, int], bytes]:
    """Read every partition from the beginning until `expected` records arrived (bounded)."""
    consumed: dict[tuple[int, int], bytes] = {}
    partitions = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
    deadline = time.monotonic() + FAILOVER_TIMEOUT_S
    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        while len(consumed) < expected and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=1000).values():
                for record in records:
                    assert record.value is not None
                    consumed[(record.partition, record.offset)] = record.value
    return consumed
