"""The producer against bad arguments and misuse: clear errors at the call, and a
producer that keeps working afterwards (a real standalone broker)."""

from __future__ import annotations

import pytest

from client import Admin, AsyncProducer, Consumer, NewTopic, Producer, TopicPartition
from client.errors import InvalidTopicError, KafkaConfigurationError, ProducerClosedError
from tests.integration.conftest import StandaloneBroker

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


def _topic(broker: StandaloneBroker, name: str) -> None:
    with Admin(broker.bootstrap) as admin:
        admin.create_topics(NewTopic(name, 2, 1))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"timestamp_ms": "now"}, "timestamp_ms must be an int"),
        ({"timestamp_ms": -5}, "timestamp_ms must be an int >= 0"),
        ({"headers": {"a": b"b"}}, "headers must be a list of (str, bytes) pairs"),
        ({"headers": [("a",)]}, "each header must be a (str, bytes) pair"),
        ({"headers": [("a", "text")]}, "each header must be a (str, bytes) pair"),
        ({"partition": "1"}, "partition must be an int or None"),
        ({"value": "text"}, "value must be bytes or None"),
    ],
)
def test_a_bad_record_is_refused_and_the_producer_keeps_working(
    standalone_broker: StandaloneBroker, kwargs: dict[str, object], message: str
) -> None:
    _topic(standalone_broker, "misuse")
    with Producer(bootstrap_servers=standalone_broker.bootstrap) as producer:
        args: dict[str, object] = {"value": b"v", **kwargs}
        with pytest.raises(TypeError) as info:
            producer.send("misuse", **args)  # type: ignore[arg-type]
        assert message in str(info.value)
        # Nothing half-appended stays behind: later sends are delivered.
        assert producer.send("misuse", b"after", partition=0).result(10).offset >= 0
        producer.flush(10)


def test_bad_topic_names_are_refused_at_once(standalone_broker: StandaloneBroker) -> None:
    with Producer(bootstrap_servers=standalone_broker.bootstrap, max_block_ms=30_000) as producer:
        with pytest.raises(TypeError, match="topic name must be a str"):
            producer.send(None, b"v")  # type: ignore[arg-type]
        with pytest.raises(InvalidTopicError, match="characters other than"):
            producer.send("a b", b"v")
        _topic(standalone_broker, "fine")
        assert producer.send("fine", b"v").result(10).offset == 0


@pytest.mark.parametrize(
    "config",
    [
        {"linger_ms": -1},
        {"max_block_ms": -1},
        {"retries": -1},
        {"retries": 1.5},
        {"batch_size": 0},
        {"request_timeout_ms": 0},
        {"lingr_ms": 5},
    ],
)
def test_bad_config_is_a_configuration_error(
    standalone_broker: StandaloneBroker, config: dict[str, object]
) -> None:
    with pytest.raises(KafkaConfigurationError) as info:
        Producer(bootstrap_servers=standalone_broker.bootstrap, **config)
    assert next(iter(config)) in str(info.value)


def test_unknown_config_suggests_the_right_name(standalone_broker: StandaloneBroker) -> None:
    with pytest.raises(KafkaConfigurationError, match="did you mean 'linger_ms'"):
        Producer(bootstrap_servers=standalone_broker.bootstrap, lingr_ms=5)


def test_use_after_close(standalone_broker: StandaloneBroker) -> None:
    producer = Producer(bootstrap_servers=standalone_broker.bootstrap)
    producer.close()
    with pytest.raises(ProducerClosedError):
        producer.send("misuse", b"v")
    with pytest.raises(ProducerClosedError):
        producer.flush()
    with pytest.raises(ProducerClosedError):
        producer.partitions_for("misuse")


async def test_async_producer_cannot_restart(standalone_broker: StandaloneBroker) -> None:
    producer = AsyncProducer(bootstrap_servers=standalone_broker.bootstrap)
    await producer.start()
    await producer.stop()
    with pytest.raises(ProducerClosedError):
        await producer.start()


def test_acks_0_does_not_wait_and_reports_no_offset(standalone_broker: StandaloneBroker) -> None:
    """As in Kafka: an acks=0 record is done once sent, without an offset; it is still
    written, also when the producer is closed right away (small batches keep several
    requests in flight at close: closing must let them go out, not cancel them)."""
    _topic(standalone_broker, "fire-and-forget")
    count = 2000
    with Producer(bootstrap_servers=standalone_broker.bootstrap, acks=0, batch_size=512) as p:
        futures = [p.send("fire-and-forget", b"%d" % i, partition=1) for i in range(count)]
        p.flush(10)
        assert {f.result(10).offset for f in futures} == {-1}
    with Consumer(
        bootstrap_servers=standalone_broker.bootstrap,
        auto_offset_reset="earliest",
        consumer_timeout_ms=3000,
    ) as consumer:
        consumer.assign([TopicPartition("fire-and-forget", 1)])
        values = [r.value for r in consumer]
    assert values == [b"%d" % i for i in range(count)]


def test_seek_to_beginning_right_after_assign_wins_over_the_automatic_reset(
    standalone_broker: StandaloneBroker,
) -> None:
    """auto_offset_reset='latest' starts a lookup at assign(); a seek_to_beginning()
    made meanwhile is the user's choice and must not be undone by it."""
    _topic(standalone_broker, "seek-race")
    with Producer(bootstrap_servers=standalone_broker.bootstrap) as producer:
        for i in range(5):
            producer.send("seek-race", b"%d" % i, partition=0)
        producer.flush(10)
    tp = TopicPartition("seek-race", 0)
    for _ in range(3):
        with Consumer(
            bootstrap_servers=standalone_broker.bootstrap, auto_offset_reset="latest"
        ) as consumer:
            consumer.assign([tp])
            consumer.seek_to_beginning(tp)
            assert consumer.position(tp) == 0
            batch = consumer.poll(timeout_ms=5000)
            assert [r.offset for r in batch[tp]][:1] == [0]
