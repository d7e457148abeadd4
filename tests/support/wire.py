"""Raw wire helpers for tests: topic creation, produce, fetch and full reads over gRPC."""

from __future__ import annotations

import time

from minikafka.errors import ErrorCode
from minikafka.record_batch import decode_records, iter_batches
from minikafka.v1 import broker_pb2, broker_pb2_grpc, controller_pb2


def now_ms() -> int:
    """Wall-clock milliseconds: record timestamps must be current, or retention.ms (7 days by
    default) deletes rolled segments, exactly as Kafka does."""
    return time.time_ns() // 1_000_000


Row = tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes]] | None]


def create_topic(
    stub: broker_pb2_grpc.BrokerServiceStub, name: str, partitions: int = 1, **configs: str
) -> controller_pb2.TopicResult:
    reply = stub.CreateTopics(
        controller_pb2.CreateTopicsRequest(
            topics=[
                controller_pb2.CreatableTopic(
                    name=name,
                    num_partitions=partitions,
                    replication_factor=1,
                    configs={k.replace("_", "."): v for k, v in configs.items()},
                )
            ]
        ),
        timeout=10,
    )
    return reply.topics[0]


def produce(
    stub: broker_pb2_grpc.BrokerServiceStub,
    topic: str,
    records: bytes,
    *,
    acks: int = -1,
    partition: int = 0,
) -> broker_pb2.PartitionProduceResponse:
    reply = stub.Produce(
        broker_pb2.ProduceRequest(
            acks=acks,
            timeout_ms=5000,
            partitions=[
                broker_pb2.PartitionProduceData(
                    topic=topic, partition=partition, records=records, current_leader_epoch=-1
                )
            ],
        ),
        timeout=10,
    )
    return reply.partitions[0]


def fetch(
    stub: broker_pb2_grpc.BrokerServiceStub,
    topic: str,
    offset: int,
    *,
    partition: int = 0,
    max_wait_ms: int = 0,
    min_bytes: int = 1,
) -> broker_pb2.FetchPartitionResponse:
    reply = stub.Fetch(
        broker_pb2.FetchRequest(
            max_wait_ms=max_wait_ms,
            min_bytes=min_bytes,
            max_bytes=8 << 20,
            partitions=[
                broker_pb2.FetchPartition(
                    topic=topic,
                    partition=partition,
                    fetch_offset=offset,
                    current_leader_epoch=-1,
                    last_fetched_epoch=-1,
                    partition_max_bytes=8 << 20,
                )
            ],
        ),
        timeout=30,
    )
    return reply.partitions[0]


def read_all(
    stub: broker_pb2_grpc.BrokerServiceStub, topic: str, partition: int = 0
) -> list[tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes]] | None]]:
    """Every committed record as (offset, timestamp, key, value, headers)."""
    out: list[tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes]] | None]] = []
    offset = 0
    while True:
        part = fetch(stub, topic, offset, partition=partition)
        assert part.error_code == ErrorCode.NONE, part.error_message
        if not part.records:
            return out
        for pos, header in iter_batches(part.records):
            batch = part.records[pos : pos + header.size]
            _, rows = decode_records(batch)
            for index, (delta, key, value, headers) in enumerate(rows):
                out.append(
                    (
                        header.base_offset + index,
                        header.first_timestamp_ms + delta,
                        key,
                        value,
                        headers,
                    )
                )
            offset = header.next_offset
