"""`send_batch` (sync and asyncio) and `metrics()` against a real standalone broker."""

from __future__ import annotations

import concurrent.futures
from typing import Any

import pytest

from client import Admin, AsyncProducer, Consumer, NewTopic, Producer, TopicPartition
from client.errors import MessageSizeTooLargeError
from client.partitioner import default_partition
from tests.integration.conftest import StandaloneBroker

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


def create(broker: StandaloneBroker, name: str, partitions: int = 1) -> None:
    with Admin(broker.bootstrap) as admin:
        admin.create_topics(NewTopic(name, partitions, 1))


def read_back(broker: StandaloneBroker, topic: str, partition: int, count: int) -> list[Any]:
    tp = TopicPartition(topic, partition)
    with Consumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([tp])
        records: list[Any] = []
        for _ in range(100):
            records.extend(consumer.poll(timeout_ms=500).get(tp, []))
            if len(records) >= count:
                break
    return records


def test_a_call_lands_in_order_with_one_future(standalone_broker: StandaloneBroker) -> None:
    create(standalone_broker, "bulk")
    values = [b"v%d" % i for i in range(5000)]
    # Small batches and buffer: one call spans many batches and waits for space.
    with Producer(
        bootstrap_servers=standalone_broker.bootstrap, batch_size=4096, buffer_memory=16384
    ) as producer:
        first = producer.send("bulk", b"before")
        future = producer.send_batch("bulk", values, partition=0)
        last = producer.send("bulk", b"after")
        metadata = future.result(30)
        assert (first.result(10).offset, last.result(10).offset) == (0, 5001)
        report = producer.metrics()["producer-metrics"]
    assert [m.offset for m in metadata] == list(range(1, 5001))
    assert {m.partition for m in metadata} == {0}
    assert metadata[0].serialized_value_size == 2
    assert metadata[0].serialized_key_size == -1
    assert metadata[0].log_start_offset == 0
    assert report["record-send-total"] == 5002
    assert report["record-send-rate"] > 0
    assert report["request-latency-avg"] >= 0
    assert [r.value for r in read_back(standalone_broker, "bulk", 0, 5002)[1:-1]] == values


def test_keys_and_headers_are_placed_as_send_places_them(
    standalone_broker: StandaloneBroker,
) -> None:
    create(standalone_broker, "bulk-keyed", partitions=4)
    keys = [b"user-%d" % i for i in range(300)]
    values = [b"value-%d" % i for i in range(300)]
    headers: list[Any] = [[("n", b"%d" % i)] if i % 2 else None for i in range(300)]
    with Producer(bootstrap_servers=standalone_broker.bootstrap) as producer:
        metadata = producer.send_batch("bulk-keyed", values, keys=keys, headers=headers).result(30)
    assert [m.partition for m in metadata] == [default_partition(k, 4) for k in keys]
    for partition in range(4):
        expected = [i for i, m in enumerate(metadata) if m.partition == partition]
        assert [m.offset for m in metadata if m.partition == partition] == list(
            range(len(expected))
        )  # in call order within the partition
        got = read_back(standalone_broker, "bulk-keyed", partition, len(expected))
        assert [(r.key, r.value) for r in got] == [(keys[i], values[i]) for i in expected]
        assert [list(r.headers) for r in got] == [
            [("n", b"%d" % i)] if i % 2 else [] for i in expected
        ]


def test_record_futures_and_batch_futures_wait_together(
    standalone_broker: StandaloneBroker,
) -> None:
    create(standalone_broker, "bulk-wait")
    with Producer(bootstrap_servers=standalone_broker.bootstrap) as producer:
        futures: list[Any] = [producer.send("bulk-wait", b"%d" % i) for i in range(50)]
        futures.append(producer.send_batch("bulk-wait", [b"x", b"y"]))
        done, not_done = concurrent.futures.wait(futures, timeout=30)
    assert (len(done), not_done) == (51, set())


def test_a_bad_record_queues_nothing(standalone_broker: StandaloneBroker) -> None:
    create(standalone_broker, "bulk-bad")
    with Producer(bootstrap_servers=standalone_broker.bootstrap, max_request_size=1000) as producer:
        with pytest.raises(TypeError, match="value must be bytes or None, got str"):
            producer.send_batch("bulk-bad", [b"ok", "not bytes"])
        with pytest.raises(ValueError, match="keys has 1 items for 2 values"):
            producer.send_batch("bulk-bad", [b"a", b"b"], keys=[b"k"])
        with pytest.raises(TypeError, match="values must be a list"):
            producer.send_batch("bulk-bad", b"abc")
        with pytest.raises(MessageSizeTooLargeError, match="record 1 of"):
            producer.send_batch("bulk-bad", [b"a", b"x" * 2000])
        with pytest.raises(ValueError, match="partition 3 of 'bulk-bad' does not exist"):
            producer.send_batch("bulk-bad", [b"a"], partition=3)
        assert producer.send_batch("bulk-bad", []).result(5) == []
        assert producer.send("bulk-bad", b"first").result(10).offset == 0  # nothing before


async def test_the_async_twin(standalone_broker: StandaloneBroker) -> None:
    create(standalone_broker, "bulk-async", partitions=2)
    async with AsyncProducer(
        standalone_broker.bootstrap, value_serializer=str.encode, key_serializer=str.encode
    ) as producer:
        future = await producer.send_batch(
            "bulk-async", ["a", "b", "c"], keys=["k", "k", "k"], timestamp_ms=1234
        )
        metadata = await future
    partition = default_partition(b"k", 2)
    assert [(m.partition, m.offset, m.timestamp) for m in metadata] == [
        (partition, 0, 1234),
        (partition, 1, 1234),
        (partition, 2, 1234),
    ]
