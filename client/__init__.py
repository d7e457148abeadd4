"""minikafka's Python client: producer and consumer (sync and asyncio), and admin.

    from client import Producer, Consumer, TopicPartition

    with Producer(bootstrap_servers="127.0.0.1:9092") as producer:
        producer.send("orders", b"hello", key=b"k1").result(timeout=10)

    with Consumer("orders", bootstrap_servers="127.0.0.1:9092",
                  auto_offset_reset="earliest") as consumer:
        for batch in consumer.poll(timeout_ms=1000).values():
            for record in batch:
                print(record.offset, record.key, record.value)

The asyncio twins are `AsyncProducer` and `AsyncConsumer`; errors live in
`client.errors`.
"""

from client.admin import Admin, AsyncAdmin
from client.consumer import AsyncConsumer
from client.futures import FutureBatchMetadata, FutureRecordMetadata
from client.group import ConsumerRebalanceListener
from client.producer import AsyncProducer, Producer
from client.records import (
    ConsumerRecord,
    NewTopic,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    RecordMetadata,
    TopicPartition,
)
from client.sync_consumer import Consumer

__all__ = [
    "Admin",
    "AsyncAdmin",
    "AsyncConsumer",
    "AsyncProducer",
    "Consumer",
    "ConsumerRebalanceListener",
    "ConsumerRecord",
    "FutureBatchMetadata",
    "FutureRecordMetadata",
    "NewTopic",
    "OffsetAndMetadata",
    "OffsetAndTimestamp",
    "Producer",
    "RecordMetadata",
    "TopicPartition",
]
