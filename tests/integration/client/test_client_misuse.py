"""The client used the way a kafka-python / aiokafka user might get wrong, against a
real `minikafka broker --standalone`: every call fails fast with a clear error of the
right class, within its configured timeouts, and never loses or skips a record."""

from __future__ import annotations

import json
import time

import pytest

from client import (
    Admin,
    AsyncConsumer,
    Consumer,
    ConsumerRecord,
    NewTopic,
    Producer,
    TopicPartition,
)
from client.errors import (
    ConsumerStoppedError,
    IllegalStateError,
    InvalidTopicError,
    KafkaConfigurationError,
    RecordDeserializationError,
    UnknownTopicOrPartitionError,
)
from tests.integration.conftest import StandaloneBroker

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


def create(broker: StandaloneBroker, name: str, partitions: int = 1) -> None:
    with Admin(broker.bootstrap) as admin:
        admin.create_topics(NewTopic(name, partitions, 1))


def produce(broker: StandaloneBroker, topic: str, values: list[bytes], partition: int = 0) -> None:
    with Producer(bootstrap_servers=broker.bootstrap, linger_ms=50) as producer:
        for value in values:
            producer.send(topic, value, partition=partition)
        producer.flush(10)


def offsets(batch: dict[TopicPartition, list[ConsumerRecord]]) -> dict[TopicPartition, list[int]]:
    return {tp: [r.offset for r in records] for tp, records in batch.items()}


def test_mixing_iteration_with_poll_and_position_skips_no_record(
    standalone_broker: StandaloneBroker,
) -> None:
    """The iterator reads ahead a batch; `poll` used to drop what it had not yielded
    yet, and `position` counted those records as consumed."""
    create(standalone_broker, "mixed", partitions=2)
    produce(standalone_broker, "mixed", [b"%d" % i for i in range(10)], partition=0)
    produce(standalone_broker, "mixed", [b"x%d" % i for i in range(4)], partition=1)
    tp0, tp1 = TopicPartition("mixed", 0), TopicPartition("mixed", 1)
    with Consumer(
        bootstrap_servers=standalone_broker.bootstrap,
        auto_offset_reset="earliest",
        consumer_timeout_ms=1500,
    ) as consumer:
        consumer.assign([tp0])
        first = next(iter(consumer))
        assert (first.offset, first.value) == (0, b"0")
        assert consumer.position(tp0) == 1
        assert offsets(consumer.poll(timeout_ms=5000, max_records=4)) == {tp0: [1, 2, 3, 4]}
        assert next(iter(consumer)).offset == 5
        # Seeking one partition keeps what was read ahead of the other (one fetch
        # brings both: they have the same leader).
        consumer.unsubscribe()
        consumer.assign([tp0, tp1])
        consumer.seek_to_beginning()
        first = next(iter(consumer))
        consumer.seek(tp1 if first.partition == 0 else tp0, 0)
        rest = [(r.partition, r.offset) for r in consumer]
        assert sorted([(first.partition, first.offset), *rest]) == [
            *((0, i) for i in range(10)),
            *((1, i) for i in range(4)),
        ]


def test_consumer_calls_in_the_wrong_state_or_with_bad_arguments(
    standalone_broker: StandaloneBroker,
) -> None:
    create(standalone_broker, "state", partitions=2)
    produce(standalone_broker, "state", [b"a", b"b"])
    tp = TopicPartition("state", 0)
    consumer = Consumer(bootstrap_servers=standalone_broker.bootstrap, request_timeout_ms=2000)
    try:
        with pytest.raises(IllegalStateError, match="not subscribed to any topic"):
            consumer.poll(timeout_ms=100)
        with pytest.raises(IllegalStateError, match="not subscribed to any topic"):
            next(iter(consumer))
        consumer.assign([tp])
        with pytest.raises(IllegalStateError, match="mutually exclusive"):
            consumer.subscribe(["state"])
        with pytest.raises(ValueError, match="max_records must be a positive int"):
            consumer.poll(timeout_ms=100, max_records=0)
        with pytest.raises(ValueError, match="timeout_ms must be >= 0"):
            consumer.poll(timeout_ms=-1)
        with pytest.raises(TypeError, match="timeout_ms must be a number"):
            consumer.poll(timeout_ms=None)  # type: ignore[arg-type]
        consumer.seek_to_end([tp])  # a list, as the Java API takes it
        assert consumer.position(tp) == 2
        started = time.monotonic()
        with pytest.raises(IllegalStateError, match="state-1 is not assigned"):
            consumer.seek_to_beginning(TopicPartition("state", 1))
        assert time.monotonic() - started < 1.0  # refused before any request
        # Partitions that do not exist: the reason, within request_timeout_ms (2 s).
        started = time.monotonic()
        with pytest.raises(UnknownTopicOrPartitionError, match="topic 'nope' does not exist"):
            consumer.end_offsets([TopicPartition("nope", 0)])
        with pytest.raises(UnknownTopicOrPartitionError, match="partition 7 of topic 'state'"):
            consumer.beginning_offsets([TopicPartition("state", 7)])
        assert time.monotonic() - started < 8.0
        assert consumer.partitions_for_topic("state") == {0, 1}
        assert consumer.partitions_for_topic("nope") is None
        assert "state" in consumer.topics()
        consumer.unsubscribe()
        consumer.assign([TopicPartition("state", 7)])
        started = time.monotonic()
        # position() used to return -1 here after the request timeout.
        with pytest.raises(UnknownTopicOrPartitionError, match="partition 7 of topic 'state'"):
            consumer.position(TopicPartition("state", 7))
        assert time.monotonic() - started < 5.0
    finally:
        consumer.close()
    for call in (
        lambda: consumer.poll(timeout_ms=10),
        lambda: consumer.position(tp),
        lambda: consumer.seek(tp, 0),
        lambda: consumer.assign([tp]),
        lambda: consumer.end_offsets([tp]),
    ):
        with pytest.raises(ConsumerStoppedError, match="the consumer is closed"):
            call()
    assert list(consumer) == []  # iteration simply ends


def test_a_failing_deserializer_stops_at_its_record(standalone_broker: StandaloneBroker) -> None:
    """A deserializer error used to drop the whole fetched batch, good records too,
    and move the position past it."""
    create(standalone_broker, "json")
    produce(standalone_broker, "json", [b"1", b"2", b"oops", b"4", b"5"])
    tp = TopicPartition("json", 0)
    with Consumer(
        bootstrap_servers=standalone_broker.bootstrap,
        auto_offset_reset="earliest",
        value_deserializer=json.loads,
    ) as consumer:
        consumer.assign([tp])
        got: list[ConsumerRecord] = []
        deadline = time.monotonic() + 10
        while len(got) < 2 and time.monotonic() < deadline:
            got.extend(consumer.poll(timeout_ms=500).get(tp, []))
        assert [(r.offset, r.value) for r in got] == [(0, 1), (1, 2)]
        for _ in range(2):  # it stays until the user seeks past the record
            with pytest.raises(RecordDeserializationError) as info:
                consumer.poll(timeout_ms=500)
            assert (info.value.tp, info.value.offset) == (tp, 2)
            assert isinstance(info.value.__cause__, json.JSONDecodeError)
            assert consumer.position(tp) == 2
        consumer.seek(tp, info.value.offset + 1)
        rest = consumer.poll(timeout_ms=5000)[tp]
        assert [(r.offset, r.value) for r in rest] == [(3, 4), (4, 5)]


def test_a_topic_that_does_not_exist_yet_holds_up_nothing(
    standalone_broker: StandaloneBroker,
) -> None:
    """The consumer used to see a topic created after `subscribe` only at the next
    `metadata_max_age_ms` (5 minutes); and one assigned partition that does not exist
    kept every other assigned partition from ever getting a position."""
    with Consumer(
        "later", bootstrap_servers=standalone_broker.bootstrap, auto_offset_reset="earliest"
    ) as consumer:
        assert consumer.poll(timeout_ms=200) == {}
        create(standalone_broker, "later")
        produce(standalone_broker, "later", [b"hello"])
        started = time.monotonic()
        values: list[bytes] = []
        while not values and time.monotonic() - started < 15:
            values = [r.value for rs in consumer.poll(timeout_ms=200).values() for r in rs]
        assert values == [b"hello"]
        assert time.monotonic() - started < 5.0
    with Consumer(
        bootstrap_servers=standalone_broker.bootstrap,
        auto_offset_reset="earliest",
        request_timeout_ms=30_000,
    ) as consumer:
        consumer.assign([TopicPartition("missing", 0), TopicPartition("later", 0)])
        started = time.monotonic()
        values = []
        while not values and time.monotonic() - started < 15:
            values = [r.value for rs in consumer.poll(timeout_ms=200).values() for r in rs]
        assert values == [b"hello"]
        assert time.monotonic() - started < 5.0  # not after the 30 s request timeout


async def test_async_consumer_argument_and_state_errors(
    standalone_broker: StandaloneBroker,
) -> None:
    tp = TopicPartition("t-async", 0)
    consumer = AsyncConsumer(bootstrap_servers=standalone_broker.bootstrap)
    await consumer.start()
    try:
        with pytest.raises(IllegalStateError, match="not subscribed"):
            await consumer.getmany(timeout_ms=10)
        consumer.assign([tp])
        with pytest.raises(ValueError, match="timeout_ms must be >= 0"):
            await consumer.getmany(timeout_ms=-5)
        with pytest.raises(ValueError, match="max_records"):
            await consumer.getmany(timeout_ms=10, max_records=0)
        with pytest.raises(IllegalStateError, match="t-async-1 is not assigned"):
            await consumer.getmany(TopicPartition("t-async", 1), timeout_ms=10)
    finally:
        await consumer.stop()


def test_producer_topic_names_are_checked_without_poisoning_it(
    standalone_broker: StandaloneBroker,
) -> None:
    """`send(None, ...)` used to make every later metadata refresh of the producer
    fail; an illegal name waited `max_block_ms` and then claimed it did not exist."""
    create(standalone_broker, "before")
    with pytest.raises(KafkaConfigurationError, match="request_timeout_ms must be >= 1"):
        Producer(bootstrap_servers=standalone_broker.bootstrap, request_timeout_ms=0)
    producer = Producer(bootstrap_servers=standalone_broker.bootstrap, max_block_ms=5000)
    try:
        with pytest.raises(TypeError, match="topic name must be a str"):
            producer.send(None, b"x")  # type: ignore[arg-type]
        started = time.monotonic()
        with pytest.raises(InvalidTopicError, match="characters other than"):
            producer.send("bad topic", b"x")
        assert time.monotonic() - started < 1.0
        create(standalone_broker, "after")  # needs a metadata refresh to be seen
        assert producer.send("after", b"x").get(10).offset == 0
        assert producer.send("before", b"x").get(10).offset == 0
    finally:
        producer.close()
    with pytest.raises(IllegalStateError, match="closed"):
        producer.flush(1)


def test_admin_takes_one_topic_name_and_number_configs(
    standalone_broker: StandaloneBroker,
) -> None:
    with Admin(standalone_broker.bootstrap) as admin:
        admin.create_topics("cfg", configs={"retention.ms": 60_000, "flush.messages": 1})
        # A str is one topic, not its characters.
        (described,) = admin.describe_topics("cfg")
        assert described.name == "cfg"
        assert described.configs["retention.ms"] == "60000"
        admin.alter_configs("cfg", {"unclean.leader.election.enable": True})
        assert admin.describe_topics(["cfg"])[0].configs["unclean.leader.election.enable"] == (
            "true"
        )
        with pytest.raises(UnknownTopicOrPartitionError, match="topic 'nope' does not exist"):
            admin.describe_topics(["nope"])


def test_a_poll_waiting_in_its_group_step_takes_nothing_once_stop_began(
    standalone_broker: StandaloneBroker,
) -> None:
    """A `getmany` parked in the group's poll step (an auto-commit, a committed-offset
    lookup) while `stop()` begins raises ConsumerStoppedError when it resumes: taking
    buffered records then would hand them out after the close read the positions it
    commits, so the group would commit records nobody was given back in time."""
    import asyncio

    create(standalone_broker, "closing")
    produce(standalone_broker, "closing", [b"%d" % i for i in range(10)])

    async def main() -> None:
        consumer = AsyncConsumer(
            bootstrap_servers=standalone_broker.bootstrap,
            group_id="closing-readers",
            auto_offset_reset="earliest",
        )
        await consumer.start()
        try:
            consumer.subscribe(["closing"])
            async with asyncio.timeout(30):
                first: dict[TopicPartition, list[ConsumerRecord]] = {}
                while not first:
                    first = await consumer.getmany(timeout_ms=100, max_records=1)
            assert offsets(first) == {TopicPartition("closing", 0): [0]}  # 1-9 are buffered
            group = consumer._group
            assert group is not None
            parked, release = asyncio.Event(), asyncio.Event()
            step = group.on_poll

            async def park_then_step() -> None:
                parked.set()
                await release.wait()
                await step()

            group.on_poll = park_then_step  # type: ignore[method-assign]
            poll = asyncio.ensure_future(consumer.getmany(timeout_ms=1000))
            await parked.wait()
            stopping = asyncio.ensure_future(consumer.stop())
            await asyncio.sleep(0)  # one loop turn: the stop task runs its first step
            assert consumer._closed  # stop() marks the consumer closed before it waits
            release.set()
            with pytest.raises(ConsumerStoppedError):
                await poll
            await stopping
        finally:
            await consumer.stop()

    asyncio.run(main())
