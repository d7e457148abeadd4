"""The client against a real `minikafka broker --standalone` process."""

from __future__ import annotations

import asyncio

import pytest

from client import (
    Admin,
    AsyncConsumer,
    AsyncProducer,
    Consumer,
    ConsumerRecord,
    NewTopic,
    Producer,
    TopicPartition,
)
from client.errors import (
    KafkaTimeoutError,
    NoOffsetForPartitionError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from client.partitioner import default_partition
from tests.integration.conftest import StandaloneBroker

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


def create(broker: StandaloneBroker, name: str, partitions: int = 1) -> None:
    with Admin(broker.bootstrap) as admin:
        admin.create_topics(NewTopic(name, partitions, 1))


def consume_all(broker: StandaloneBroker, topic: str, expected: int) -> list[ConsumerRecord]:
    with Consumer(
        topic,
        bootstrap_servers=broker.bootstrap,
        auto_offset_reset="earliest",
        consumer_timeout_ms=3000,
    ) as consumer:
        records = []
        for record in consumer:
            records.append(record)
            if len(records) >= expected:
                break
        return records


def test_keyed_records_land_on_the_murmur2_partition(standalone_broker: StandaloneBroker) -> None:
    create(standalone_broker, "keyed", partitions=5)
    keys = [f"user-{i}".encode() for i in range(200)]
    with Producer(bootstrap_servers=standalone_broker.bootstrap) as producer:
        futures = [producer.send("keyed", b"v-" + key, key=key) for key in keys]
        producer.flush()
        metadata = [f.result(10) for f in futures]
    for key, md in zip(keys, metadata, strict=True):
        assert md.partition == default_partition(key, 5)
    records = consume_all(standalone_broker, "keyed", len(keys))
    assert len(records) == len(keys)
    for record in records:
        assert record.partition == default_partition(record.key, 5)
        assert record.value == b"v-" + record.key


def test_every_record_once_and_in_order_per_partition(standalone_broker: StandaloneBroker) -> None:
    create(standalone_broker, "ordered", partitions=3)
    count = 20_000
    with Producer(bootstrap_servers=standalone_broker.bootstrap, linger_ms=2) as producer:
        futures = [
            producer.send(
                "ordered", str(i).encode(), key=str(i % 7).encode(), headers=[("h", b"1")]
            )
            for i in range(count)
        ]
        producer.flush()
        offsets = {(md.partition, md.offset) for md in (f.result(10) for f in futures)}
    assert len(offsets) == count
    records = consume_all(standalone_broker, "ordered", count)
    assert sorted(int(r.value) for r in records) == list(range(count))
    by_key: dict[bytes, list[int]] = {}
    for r in records:
        by_key.setdefault(r.key, []).append(int(r.value))
        assert r.headers == [("h", b"1")]
    for values in by_key.values():
        assert values == sorted(values)


def test_batches_are_sized_to_the_brokers_limit(standalone_broker: StandaloneBroker) -> None:
    """A batch_size above the broker's max.message.bytes (1 MiB + 1 KiB by default) is
    capped by the limit the broker reports in metadata, so no batch is rejected."""
    create(standalone_broker, "big-batches")
    value = bytes(range(256)) * 4  # 1 KiB
    count = 3000  # ~3 MiB: one 4 MiB batch if uncapped
    with Producer(
        bootstrap_servers=standalone_broker.bootstrap, batch_size=4 << 20, linger_ms=50
    ) as producer:
        futures = [producer.send("big-batches", value) for _ in range(count)]
        producer.flush()
        offsets = [f.result(timeout=10).offset for f in futures]
    assert offsets == list(range(count))
    assert [r.value for r in consume_all(standalone_broker, "big-batches", count)] == [
        value
    ] * count


@pytest.mark.parametrize("codec", ["gzip", "lz4", "zstd"])
def test_compressed_batches_round_trip(standalone_broker: StandaloneBroker, codec: str) -> None:
    create(standalone_broker, f"c-{codec}")
    with Producer(
        bootstrap_servers=standalone_broker.bootstrap, compression_type=codec
    ) as producer:
        for i in range(500):
            producer.send(f"c-{codec}", b"payload %d" % i)
        producer.flush()
    records = consume_all(standalone_broker, f"c-{codec}", 500)
    assert [r.value for r in records] == [b"payload %d" % i for i in range(500)]


def test_serializers_and_type_errors(standalone_broker: StandaloneBroker) -> None:
    create(standalone_broker, "ser")
    with (
        Producer(bootstrap_servers=standalone_broker.bootstrap) as producer,
        pytest.raises(TypeError, match="value_serializer"),
    ):
        producer.send("ser", "not bytes")
    with Producer(
        bootstrap_servers=standalone_broker.bootstrap,
        value_serializer=str.encode,
        key_serializer=str.encode,
    ) as producer:
        producer.send("ser", "hello", key="k").result(10)
    with Consumer(
        "ser",
        bootstrap_servers=standalone_broker.bootstrap,
        auto_offset_reset="earliest",
        value_deserializer=bytes.decode,
        consumer_timeout_ms=3000,
    ) as consumer:
        record = next(iter(consumer))
    assert (record.key, record.value) == (b"k", "hello")


def test_seek_and_position(standalone_broker: StandaloneBroker) -> None:
    create(standalone_broker, "seek")
    tp = TopicPartition("seek", 0)
    with Producer(bootstrap_servers=standalone_broker.bootstrap) as producer:
        for i in range(50):
            producer.send("seek", b"%d" % i)
        producer.flush()
    with Consumer(bootstrap_servers=standalone_broker.bootstrap, auto_offset_reset="earliest") as c:
        c.assign([tp])
        assert c.assignment() == {tp}
        assert c.position(tp) == 0
        got = c.poll(timeout_ms=5000, max_records=10)
        assert [r.offset for r in got[tp]] == list(range(10))
        assert c.position(tp) == 10
        c.seek(tp, 42)
        assert c.position(tp) == 42
        got = c.poll(timeout_ms=5000, max_records=3)
        assert [r.offset for r in got[tp]] == [42, 43, 44]
        c.seek_to_end(tp)
        assert c.position(tp) == 50
        assert c.poll(timeout_ms=200) == {}
        c.seek_to_beginning(tp)
        assert c.position(tp) == 0
        assert c.poll(timeout_ms=5000, max_records=1)[tp][0].value == b"0"
        assert c.end_offsets([tp]) == {tp: 50}
        assert c.beginning_offsets([tp]) == {tp: 0}
    with Consumer(bootstrap_servers=standalone_broker.bootstrap, auto_offset_reset="latest") as c:
        c.assign([tp])
        assert c.position(tp) == 50
    with Consumer(bootstrap_servers=standalone_broker.bootstrap, auto_offset_reset="none") as c:
        c.assign([tp])
        with pytest.raises(NoOffsetForPartitionError):
            c.poll(timeout_ms=100)
        c.seek(tp, 49)
        assert c.poll(timeout_ms=5000)[tp][0].value == b"49"


def test_subscribe_reads_all_partitions(standalone_broker: StandaloneBroker) -> None:
    create(standalone_broker, "sub", partitions=4)
    with Producer(bootstrap_servers=standalone_broker.bootstrap) as producer:
        for p in range(4):
            producer.send("sub", b"x", partition=p)
        producer.flush()
    with Consumer(bootstrap_servers=standalone_broker.bootstrap, auto_offset_reset="earliest") as c:
        c.subscribe(["sub"])
        assert c.assignment() == {TopicPartition("sub", p) for p in range(4)}


def test_admin_errors_carry_code_and_message(standalone_broker: StandaloneBroker) -> None:
    with Admin(standalone_broker.bootstrap) as admin:
        admin.create_topics(NewTopic("adm", 2, 1))
        with pytest.raises(TopicAlreadyExistsError) as info:
            admin.create_topics("adm")
        assert "adm" in str(info.value)
        assert info.value.errno == 36
        described = admin.describe_topics(["adm"])
        assert [p.partition for p in described[0].partitions] == [0, 1]
        assert "adm" in admin.list_topics()
        with pytest.raises(UnknownTopicOrPartitionError):
            admin.describe_topics(["nope"])
        admin.delete_topics("adm")
        assert "adm" not in admin.list_topics()


def test_send_to_a_missing_topic_times_out(standalone_broker: StandaloneBroker) -> None:
    with (
        Producer(bootstrap_servers=standalone_broker.bootstrap, max_block_ms=300) as producer,
        pytest.raises(KafkaTimeoutError, match="missing"),
    ):
        producer.send("missing", b"x")


async def test_async_producer_and_consumer(standalone_broker: StandaloneBroker) -> None:
    await asyncio.to_thread(create, standalone_broker, "aio", 2)
    async with AsyncProducer(bootstrap_servers=standalone_broker.bootstrap) as producer:
        md = await producer.send_and_wait("aio", b"first", partition=0)
        assert (md.topic, md.partition, md.offset) == ("aio", 0, 0)
        futures = [await producer.send("aio", b"%d" % i, partition=1) for i in range(100)]
        await producer.flush()
        assert [(await f).offset for f in futures] == list(range(100))
    async with AsyncConsumer(
        "aio",
        bootstrap_servers=standalone_broker.bootstrap,
        auto_offset_reset="earliest",
        consumer_timeout_ms=2000,
    ) as consumer:
        one = await consumer.getone(TopicPartition("aio", 0))
        assert one.value == b"first"
        values = [record.value async for record in consumer]
        assert values == [b"%d" % i for i in range(100)]
        assert await consumer.position(TopicPartition("aio", 1)) == 100
