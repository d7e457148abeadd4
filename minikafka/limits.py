"""PURE resource limits on topics and partitions, shared by the controller and a standalone broker.

Every limit is named with its unit, has a documented default (README "Limits"), can be
changed on the command line of the process that enforces it, and is checked where a
request enters (CreateTopics, before any placement or journal write). A refusal is a
`MiniKafkaError` whose code is Kafka's and whose message names the limit:

| limit (flag)                         | default  | refusal            |
|--------------------------------------|----------|--------------------|
| `--max-partitions-per-topic`         | 10,000   | INVALID_PARTITIONS |
| `--max-partitions-per-cluster`       | 100,000  | POLICY_VIOLATION   |
| `--max-partitions-per-broker`        | 4,000    | POLICY_VIOLATION   |
| `--min-segment-bytes` (segment.bytes)| 1 MiB    | INVALID_CONFIG     |
| `--min-segment-ms` (segment.ms)      | 60,000   | INVALID_CONFIG     |

Partitions per broker counts replicas: a broker hosting one replica each of 4,000
partitions is full. Kafka suggests about 4,000 partitions per broker; each one costs a
directory, an open active segment (within the broker's file budget) and heartbeat work.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Annotated, Final

import msgspec

from minikafka.errors import ErrorCode, MiniKafkaError

#: The gRPC send and receive message limit of every server and channel (64 MiB).
GRPC_MESSAGE_BYTES_MAX: Final = 64 * 1024 * 1024
#: Room kept for request / response framing around the batches of one message.
MESSAGE_FRAMING_RESERVE_BYTES: Final = 1024 * 1024
#: Largest `max.message.bytes`: one batch always fits in a request and a fetch response.
MESSAGE_BYTES_MAX: Final = GRPC_MESSAGE_BYTES_MAX - MESSAGE_FRAMING_RESERVE_BYTES
#: Smallest `max.message.bytes`: a batch header and a few small records (0 would refuse
#: every produce).
MESSAGE_BYTES_MIN: Final = 1024

MAX_PARTITIONS_PER_TOPIC_DEFAULT: Final = 10_000
MAX_PARTITIONS_PER_CLUSTER_DEFAULT: Final = 100_000
MAX_PARTITIONS_PER_BROKER_DEFAULT: Final = 4_000
MIN_SEGMENT_BYTES_DEFAULT: Final = 1024 * 1024
MIN_SEGMENT_MS_DEFAULT: Final = 60_000

Positive = Annotated[int, msgspec.Meta(ge=1)]


class TopicLimits(msgspec.Struct, frozen=True, kw_only=True):
    """The limits a CreateTopics / AlterConfigs request is checked against."""

    max_partitions_per_topic: Positive = MAX_PARTITIONS_PER_TOPIC_DEFAULT
    max_partitions_per_cluster: Positive = MAX_PARTITIONS_PER_CLUSTER_DEFAULT
    #: Replicas one broker may host.
    max_partitions_per_broker: Positive = MAX_PARTITIONS_PER_BROKER_DEFAULT
    #: Smallest accepted `segment.bytes` topic config.
    min_segment_bytes: Positive = MIN_SEGMENT_BYTES_DEFAULT
    #: Smallest accepted `segment.ms` topic config.
    min_segment_ms: Positive = MIN_SEGMENT_MS_DEFAULT


def check_partition_count(num_partitions: int, limits: TopicLimits) -> None:
    """Raise INVALID_PARTITIONS unless 1 <= `num_partitions` <= max partitions per topic.

    Checked before placement, so an absurd request costs nothing.
    """
    if num_partitions < 1:
        raise MiniKafkaError(
            f"number of partitions must be at least 1, got {num_partitions}",
            code=ErrorCode.INVALID_PARTITIONS,
        )
    if num_partitions > limits.max_partitions_per_topic:
        raise MiniKafkaError(
            f"{num_partitions} partitions exceed the limit max.partitions.per.topic="
            f"{limits.max_partitions_per_topic}",
            code=ErrorCode.INVALID_PARTITIONS,
        )


def replicas_per_broker(assignments: Iterable[Sequence[int]]) -> dict[int, int]:
    """How many replicas of `assignments` (one replica list per partition) each broker hosts."""
    counts: dict[int, int] = {}
    for replicas in assignments:
        for broker_id in replicas:
            counts[broker_id] = counts.get(broker_id, 0) + 1
    return counts


def check_capacity(
    *,
    existing_partitions: int,
    existing_replicas: Mapping[int, int],
    new_assignment: Sequence[Sequence[int]],
    limits: TopicLimits,
) -> None:
    """Raise POLICY_VIOLATION if adding `new_assignment` (replica lists of the new
    partitions) would pass the cluster-wide partition limit or fill a broker beyond its
    replica limit. `existing_*` include what earlier topics of the same request added."""
    total = existing_partitions + len(new_assignment)
    if total > limits.max_partitions_per_cluster:
        raise MiniKafkaError(
            f"the cluster would hold {total} partitions, above the limit "
            f"max.partitions.per.cluster={limits.max_partitions_per_cluster} "
            f"({existing_partitions} exist)",
            code=ErrorCode.POLICY_VIOLATION,
        )
    for broker_id, added in sorted(replicas_per_broker(new_assignment).items()):
        hosted = existing_replicas.get(broker_id, 0) + added
        if hosted > limits.max_partitions_per_broker:
            raise MiniKafkaError(
                f"broker {broker_id} would host {hosted} partition replicas, above the limit "
                f"max.partitions.per.broker={limits.max_partitions_per_broker} "
                f"({existing_replicas.get(broker_id, 0)} exist)",
                code=ErrorCode.POLICY_VIOLATION,
            )
