"""What admin calls return: descriptions of brokers, topics, partitions, offsets and
partition histories, and the pure translation of the wire's answers into them."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from client.errors import MiniKafkaClientError, from_response
from minikafka.errors import ErrorCode
from minikafka.v1 import common_pb2, controller_pb2


class BrokerDescription(msgspec.Struct, frozen=True, kw_only=True):
    broker_id: int
    host: str
    port: int
    rack: str
    broker_epoch: int = -1
    fenced: bool = False
    in_controlled_shutdown: bool = False


class PartitionDescription(msgspec.Struct, frozen=True, kw_only=True):
    partition: int
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    offline_replicas: list[int]
    #: "ONLINE", "OFFLINE" or "RECOVERING".
    state: str
    error_code: int = 0
    #: Eligible leader replicas (KIP-966): out of the ISR but holding every committed
    #: record, electable when no ISR member is.
    elr: list[int] = msgspec.field(default_factory=list)
    #: No longer eligible (restarted without proof that their log is whole): the last
    #: replicas known to have held every committed record.
    last_known_elr: list[int] = msgspec.field(default_factory=list)


class TopicDescription(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    partitions: list[PartitionDescription]
    configs: dict[str, str]
    error_code: int = 0


class ClusterDescription(msgspec.Struct, frozen=True, kw_only=True):
    cluster_id: str
    controller_id: int
    controller_epoch: int
    brokers: list[BrokerDescription]
    topics: list[TopicDescription]
    #: Whether the controller keeps eligible leader replicas (KIP-966).
    eligible_leader_replicas_enabled: bool = True

    def to_dict(self) -> dict[str, Any]:
        result: dict[str, Any] = msgspec.to_builtins(self)
        return result


class NewPartitions(msgspec.Struct, frozen=True):
    """The new total partition count of a topic, for `create_partitions` (kafka-python's
    `NewPartitions(total_count)`; explicit assignments are not supported: new partitions
    are placed as creation places them)."""

    total_count: int


#: Where `list_offsets` looks: the first offset, the high watermark, or the first offset
#: whose timestamp is at or after a time (ms since the epoch).
OffsetSpec = Literal["earliest", "latest"] | int


class OffsetInfo(msgspec.Struct, frozen=True, kw_only=True):
    """A partition's offset as its leader answered, with the leader's log around it."""

    #: The offset asked for; -1 when no record has a timestamp at or after the one given.
    offset: int
    timestamp_ms: int
    leader_epoch: int
    log_start_offset: int
    high_watermark: int
    log_end_offset: int


class PartitionHistoryEvent(msgspec.Struct, frozen=True, kw_only=True):
    """One step of a partition's history as the controller derived it (see
    `describe_partition_history`)."""

    metadata_offset: int
    time_ms: int
    replayed: bool
    kinds: list[str]
    leader: int
    leader_epoch: int
    partition_epoch: int
    replicas: list[int]
    isr: list[int]
    #: None when the controller does not have eligible leader replicas (KIP-966).
    elr: list[int] | None
    last_known_elr: list[int] | None
    state: str
    previous_leader: int
    #: The broker of a broker event (-1 on partition and controller events).
    broker_id: int
    broker_epoch: int
    detail: str


class PartitionHistory(msgspec.Struct, frozen=True, kw_only=True):
    topic: str
    partition: int
    events: list[PartitionHistoryEvent]
    #: Older events are missing (the bounded history dropped them, or the controller
    #: started after them).
    truncated: bool
    controller_id: int


class ElectionResult(msgspec.Struct, frozen=True, kw_only=True):
    topic: str
    partition: int
    leader: int
    error_code: int = 0
    error_message: str = ""

    @property
    def error(self) -> MiniKafkaClientError | None:
        """The partition's error (None on success)."""
        if self.error_code == ErrorCode.NONE:
            return None
        return from_response(
            self.error_code, self.error_message, context=f"{self.topic}-{self.partition}"
        )


def partition_history(
    topic: str, partition: int, response: controller_pb2.DescribePartitionHistoryResponse
) -> PartitionHistory:
    """The client's view of a `DescribePartitionHistory` answer."""
    return PartitionHistory(
        topic=topic,
        partition=partition,
        truncated=response.truncated,
        controller_id=response.controller_id,
        events=[
            PartitionHistoryEvent(
                metadata_offset=e.metadata_offset,
                time_ms=e.time_ms,
                replayed=e.replayed,
                kinds=list(e.kinds),
                leader=e.leader,
                leader_epoch=e.leader_epoch,
                partition_epoch=e.partition_epoch,
                replicas=list(e.replicas),
                isr=list(e.isr),
                elr=list(e.elr) if e.has_elr else None,
                last_known_elr=list(e.last_known_elr) if e.has_elr else None,
                state=e.state,
                previous_leader=e.previous_leader,
                broker_id=e.broker_id,
                broker_epoch=e.broker_epoch,
                detail=e.detail,
            )
            for e in response.events
        ],
    )


def describe_topic(topic: common_pb2.TopicMetadata) -> TopicDescription:
    return TopicDescription(
        name=topic.name,
        error_code=int(topic.error_code),
        configs=dict(topic.configs),
        partitions=sorted(
            (
                PartitionDescription(
                    partition=p.partition,
                    leader=p.leader,
                    leader_epoch=p.leader_epoch,
                    replicas=list(p.replicas),
                    isr=list(p.isr),
                    offline_replicas=list(p.offline_replicas),
                    state=p.state or "ONLINE",
                    error_code=int(p.error_code),
                    elr=list(p.elr),
                    last_known_elr=list(p.last_known_elr),
                )
                for p in topic.partitions
            ),
            key=lambda d: d.partition,
        ),
    )
