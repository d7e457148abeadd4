"""The client's view of the cluster (PURE): brokers and partition leadership.

`ClusterView.from_response` turns a `MetadataResponse` into a frozen value; the
producer, consumer and admin ask it who leads a partition, which replica to read from
(`client_rack`, KIP-392) and which partitions a topic has. Refreshing is the
transport's job; this module never does I/O.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from client.records import TopicPartition
from minikafka.errors import ErrorCode
from minikafka.v1 import broker_pb2


class BrokerInfo(msgspec.Struct, frozen=True, kw_only=True):
    broker_id: int
    host: str
    port: int
    rack: str = ""

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


class PartitionInfo(msgspec.Struct, frozen=True, kw_only=True):
    topic: str
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    error_code: int = 0


class TopicInfo(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    error_code: int
    partitions: dict[int, PartitionInfo]
    configs: dict[str, str]
    #: The largest batch the brokers accept for the topic (0: not reported).
    max_message_bytes: int = 0


class ClusterView(msgspec.Struct, frozen=True, kw_only=True):
    cluster_id: str = ""
    controller_id: int = -1
    brokers: dict[int, BrokerInfo] = msgspec.field(default_factory=dict)
    topics: dict[str, TopicInfo] = msgspec.field(default_factory=dict)

    @classmethod
    def from_response(cls, response: broker_pb2.MetadataResponse) -> ClusterView:
        brokers = {
            b.broker_id: BrokerInfo(broker_id=b.broker_id, host=b.host, port=b.port, rack=b.rack)
            for b in response.brokers
        }
        topics = {
            t.name: TopicInfo(
                name=t.name,
                error_code=int(t.error_code),
                partitions={
                    p.partition: PartitionInfo(
                        topic=t.name,
                        partition=p.partition,
                        leader=p.leader,
                        leader_epoch=p.leader_epoch,
                        replicas=tuple(p.replicas),
                        isr=tuple(p.isr),
                        error_code=int(p.error_code),
                    )
                    for p in t.partitions
                },
                configs=dict(t.configs),
                max_message_bytes=t.max_message_bytes,
            )
            for t in response.topics
        }
        return cls(
            cluster_id=response.cluster_id,
            controller_id=response.controller_id,
            brokers=brokers,
            topics=topics,
        )

    def merged(self, newer: ClusterView, refreshed_topics: Iterable[str]) -> ClusterView:
        """`newer` for brokers and the refreshed topics; our view for topics not asked for."""
        asked = set(refreshed_topics)
        topics = {name: t for name, t in self.topics.items() if name not in asked and asked}
        for name, fresh in newer.topics.items():
            topics[name] = _no_older_epochs(self.topics.get(name), fresh)
        return ClusterView(
            cluster_id=newer.cluster_id or self.cluster_id,
            controller_id=newer.controller_id,
            brokers=newer.brokers or self.brokers,
            topics=topics,
        )

    def partitions_for(self, topic: str) -> list[int] | None:
        """Sorted partition ids of `topic`, or None when the topic is unknown."""
        info = self.topics.get(topic)
        if info is None or info.error_code != ErrorCode.NONE or not info.partitions:
            return None
        return sorted(info.partitions)

    def available_partitions(self, topic: str) -> list[int]:
        """Partitions of `topic` that have a leader we know how to reach."""
        info = self.topics.get(topic)
        if info is None:
            return []
        return sorted(
            p.partition
            for p in info.partitions.values()
            if p.leader >= 0 and p.leader in self.brokers
        )

    def partition(self, topic: str, partition: int) -> PartitionInfo | None:
        info = self.topics.get(topic)
        return None if info is None else info.partitions.get(partition)

    def leader_moved(self, sent_epochs: Iterable[tuple[TopicPartition, int]]) -> bool:
        """Whether any of these partitions has a newer leader epoch than the one given
        (the epoch a request was sent under)."""
        for tp, epoch in sent_epochs:
            info = self.partition(tp.topic, tp.partition)
            if info is not None and info.leader_epoch > epoch:
                return True
        return False

    def leader(self, topic: str, partition: int) -> BrokerInfo | None:
        """The leader of the partition, or None when it has none or it is unknown."""
        p = self.partition(topic, partition)
        if p is None or p.leader < 0:
            return None
        return self.brokers.get(p.leader)

    def read_replica(
        self, topic: str, partition: int, client_rack: str | None
    ) -> BrokerInfo | None:
        """Where a consumer in `client_rack` should fetch from: an in-sync replica in the
        same rack when there is one (KIP-392), otherwise the leader."""
        p = self.partition(topic, partition)
        if p is None or p.leader < 0:
            return None
        leader = self.brokers.get(p.leader)
        if client_rack and (leader is None or leader.rack != client_rack):
            for replica_id in p.isr:
                broker = self.brokers.get(replica_id)
                if broker is not None and broker.rack == client_rack:
                    return broker
        return leader


def _no_older_epochs(known: TopicInfo | None, fresh: TopicInfo) -> TopicInfo:
    """`fresh`, except partitions whose leader epoch is older than what we know (KIP-320:
    a broker cut off from the controller answers with a stale view; never go back to it).
    A topic whose partition set changed is taken as it is (it was re-created)."""
    if known is None or set(known.partitions) != set(fresh.partitions):
        return fresh
    partitions = {
        index: (
            known.partitions[index]
            if known.partitions[index].leader_epoch > info.leader_epoch
            else info
        )
        for index, info in fresh.partitions.items()
    }
    return msgspec.structs.replace(fresh, partitions=partitions)
