"""Client arguments are checked before anything connects: unknown config keys, bad
values, bad topic names and partitions, and calls in the wrong state raise a clear
error of the kafka-python class at once (no sockets here)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest

from client import Admin, AsyncAdmin, AsyncConsumer, Consumer, NewTopic, TopicPartition
from client.errors import (
    ConsumerStoppedError,
    IllegalStateError,
    InvalidTopicError,
    KafkaConfigurationError,
    LeaderNotAvailableError,
    MiniKafkaClientError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
)
from client.loop_thread import LoopThread
from client.metadata import BrokerInfo, ClusterView, PartitionInfo, TopicInfo
from client.offset_rules import missing_partition_error
from client.transport import BrokerConnections, check_topic_name, parse_bootstrap

#: Nothing listens here; none of these tests may get as far as connecting.
NOWHERE = "127.0.0.1:1"


def test_configuration_error_is_a_kafka_error_a_type_error_and_a_value_error() -> None:
    error = KafkaConfigurationError("bad")
    assert isinstance(error, MiniKafkaClientError)
    assert isinstance(error, TypeError)
    assert isinstance(error, ValueError)
    assert (error.errno, error.retriable, error.invalid_metadata) == (40, False, False)


def test_unknown_consumer_config_keys_are_refused_with_the_closest_name() -> None:
    with pytest.raises(KafkaConfigurationError, match=r"'fetch_max_wait'.*'fetch_max_wait_ms'"):
        Consumer(bootstrap_servers=NOWHERE, fetch_max_wait=100)
    with pytest.raises(KafkaConfigurationError, match=r"sasl_mechanism.*no SASL"):
        Consumer("t", bootstrap_servers=NOWHERE, sasl_mechanism="PLAIN")


def test_unknown_admin_config_keys_are_refused() -> None:
    with pytest.raises(KafkaConfigurationError, match=r"'request_timeout'.*'request_timeout_ms'"):
        Admin(NOWHERE, request_timeout=1000)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"auto_offset_reset": "smallest"}, "auto_offset_reset"),
        ({"max_poll_records": 0}, "max_poll_records must be >= 1"),
        ({"max_poll_records": 1.5}, "max_poll_records must be an int"),
        ({"fetch_max_wait_ms": -1}, "fetch_max_wait_ms must be >= 0"),
        ({"fetch_min_bytes": -1}, "fetch_min_bytes must be >= 0"),
        ({"fetch_max_bytes": 0}, "fetch_max_bytes must be >= 1"),
        ({"max_partition_fetch_bytes": 0}, "max_partition_fetch_bytes must be >= 1"),
        ({"request_timeout_ms": 0, "fetch_max_wait_ms": 0}, "request_timeout_ms must be >= 1"),
        ({"request_timeout_ms": 400}, "request_timeout_ms .400. must be larger"),
        ({"retry_backoff_ms": -5}, "retry_backoff_ms must be >= 0"),
        ({"consumer_timeout_ms": -1}, "consumer_timeout_ms must be >= 0"),
        ({"consumer_timeout_ms": "1000"}, "consumer_timeout_ms must be a number"),
        ({"metadata_max_age_ms": True}, "metadata_max_age_ms must be a number"),
        ({"client_rack": 3}, "client_rack must be a str"),
    ],
)
def test_bad_consumer_values_are_refused(config: dict[str, Any], message: str) -> None:
    with pytest.raises(KafkaConfigurationError, match=message):
        AsyncConsumer("t", bootstrap_servers=NOWHERE, **config)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"request_timeout_ms": 0}, "request_timeout_ms must be >= 1"),
        ({"request_timeout_ms": -5}, "request_timeout_ms must be >= 1"),
        ({"retry_backoff_ms": -1}, "retry_backoff_ms must be >= 0"),
        ({"metadata_max_age_ms": "1"}, "metadata_max_age_ms must be a number"),
    ],
)
def test_connections_refuse_timeouts_that_could_never_succeed(
    config: dict[str, Any], message: str
) -> None:
    # Every client (the producer too) builds its connections with these settings.
    with pytest.raises(KafkaConfigurationError, match=message):
        BrokerConnections(NOWHERE, **config)


def test_bootstrap_servers_of_the_wrong_type_are_refused() -> None:
    with pytest.raises(TypeError, match="bootstrap_servers"):
        parse_bootstrap(9092)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="'HOST:PORT' strings"):
        parse_bootstrap([None])  # type: ignore[list-item]
    assert parse_bootstrap(("h1:1", "h2:2,h3:3")) == ["h1:1", "h2:2", "h3:3"]


@pytest.mark.parametrize(
    ("name", "error", "message"),
    [
        (None, TypeError, "must be a str, got NoneType"),
        (b"t", TypeError, "must be a str, got bytes"),
        ("", InvalidTopicError, "empty"),
        ("..", InvalidTopicError, "not allowed"),
        ("a b", InvalidTopicError, "characters other than"),
        ("x" * 250, InvalidTopicError, "250 characters long"),
    ],
)
def test_illegal_topic_names_are_refused(
    name: object, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        check_topic_name(name)


def test_a_bad_topic_name_is_not_tracked_for_later_metadata_requests() -> None:
    """`send(None, ...)` once made every later metadata request of the producer fail
    (`sorted()` of the tracked names met None)."""
    conn = BrokerConnections(NOWHERE)
    conn.add_topics(["good"])
    with pytest.raises(TypeError):
        conn.add_topics([None])  # type: ignore[list-item]
    with pytest.raises(InvalidTopicError):
        conn.add_topics(["also-good", "bad name"])
    assert sorted(conn._topics) == ["good"]
    assert check_topic_name("a.B_c-1") == "a.B_c-1"


def test_subscribe_and_assign_are_mutually_exclusive() -> None:
    tp = TopicPartition("t", 0)
    consumer = AsyncConsumer("t", bootstrap_servers=NOWHERE)
    with pytest.raises(IllegalStateError, match=r"mutually exclusive.*unsubscribe"):
        consumer.assign([tp])
    assert consumer.subscription() == {"t"}
    consumer.unsubscribe()
    consumer.assign([tp])
    with pytest.raises(IllegalStateError, match=r"mutually exclusive.*unsubscribe"):
        consumer.subscribe(["t"])
    assert consumer.assignment() == {tp}
    consumer.assign([])  # as in Kafka, an empty assignment unassigns
    consumer.subscribe("t")  # one topic as a str, not its characters
    assert consumer.subscription() == {"t"}
    consumer.subscribe([])
    assert (consumer.subscription(), consumer.assignment()) == (set(), set())


def test_topics_and_partitions_are_checked_and_plain_tuples_accepted() -> None:
    consumer = AsyncConsumer(["a", "b"], bootstrap_servers=NOWHERE)  # type: ignore[arg-type]
    assert consumer.subscription() == {"a", "b"}
    consumer.unsubscribe()
    with pytest.raises(TypeError, match="list of TopicPartition"):
        consumer.assign("t")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="list of TopicPartition"):
        consumer.assign(TopicPartition("t", 0))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must be an int >= 0"):
        consumer.assign([("t", -1)])  # type: ignore[list-item]
    with pytest.raises(InvalidTopicError):
        consumer.assign([("bad topic", 0)])  # type: ignore[list-item]
    with pytest.raises(InvalidTopicError):
        consumer.subscribe(["bad topic"])
    assert consumer.assignment() == set()
    consumer.assign([("t", 1)])  # type: ignore[list-item]
    assert consumer.assignment() == {TopicPartition("t", 1)}


def test_seek_checks_the_offset() -> None:
    tp = TopicPartition("t", 0)
    consumer = AsyncConsumer(bootstrap_servers=NOWHERE)
    consumer.assign([tp])
    with pytest.raises(TypeError, match="offset must be an int, got str"):
        consumer.seek(tp, "5")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="offset must be an int, got bool"):
        consumer.seek(tp, True)
    with pytest.raises(ValueError, match="offset must be >= 0"):
        consumer.seek(tp, -1)
    with pytest.raises(IllegalStateError, match="t-1 is not assigned"):
        consumer.seek(TopicPartition("t", 1), 0)
    consumer.seek(tp, 5)
    assert consumer.subscription_state.state(tp).position() == 5


async def test_a_stopped_consumer_cannot_be_used_or_started_again() -> None:
    tp = TopicPartition("t", 0)
    consumer = AsyncConsumer(bootstrap_servers=NOWHERE)
    consumer.assign([tp])
    await consumer.stop()
    with pytest.raises(ConsumerStoppedError, match="create a new one"):
        await consumer.start()  # used to open connections a stopped consumer never closes
    calls: list[Callable[[], None]] = [
        lambda: consumer.seek(tp, 0),
        lambda: consumer.assign([tp]),
        lambda: consumer.subscribe(["t"]),
        consumer.unsubscribe,
    ]
    for call in calls:
        with pytest.raises(ConsumerStoppedError):
            call()
    with pytest.raises(ConsumerStoppedError):
        await consumer.getmany(timeout_ms=0)
    assert [r async for r in consumer] == []  # `async for` ends, as in aiokafka


def test_a_stopped_loop_thread_refuses_calls_and_closes_the_coroutine() -> None:
    async def work() -> int:
        return 1

    thread = LoopThread("t-default")
    assert thread.run(work()) == 1
    thread.stop()
    coro = work()
    with pytest.raises(IllegalStateError, match="t-default: the client is closed"):
        thread.run(coro)
    # Closed, so no "coroutine was never awaited" warning.
    assert inspect.getcoroutinestate(coro) == inspect.CORO_CLOSED

    custom = LoopThread("t-custom", closed_error=lambda: ConsumerStoppedError("gone"))
    custom.stop()
    with pytest.raises(ConsumerStoppedError, match="gone"):
        custom.run(work())


def _view(partitions: dict[int, int]) -> ClusterView:
    """Topic `t` with these partitions (id -> leader); broker 1 exists."""
    return ClusterView(
        brokers={1: BrokerInfo(broker_id=1, host="h", port=1)},
        topics={
            "t": TopicInfo(
                name="t",
                error_code=0,
                configs={},
                partitions={
                    p: PartitionInfo(
                        topic="t", partition=p, leader=leader, leader_epoch=0, replicas=(1,), isr=()
                    )
                    for p, leader in partitions.items()
                },
            )
        },
    )


def test_offsets_of_missing_partitions_fail_with_the_reason() -> None:
    view = _view({0: 1, 1: -1})
    missing_topic = missing_partition_error(view, [TopicPartition("nope", 0)], None)
    assert isinstance(missing_topic, UnknownTopicOrPartitionError)
    assert str(missing_topic) == "topic 'nope' does not exist"
    missing_partition = missing_partition_error(view, [TopicPartition("t", 7)], None)
    assert isinstance(missing_partition, UnknownTopicOrPartitionError)
    assert "partition 7 of topic 't' does not exist (it has partitions 0-1)" in str(
        missing_partition
    )
    leaderless = missing_partition_error(view, [TopicPartition("t", 1)], None)
    assert isinstance(leaderless, LeaderNotAvailableError)
    assert "t-1" in str(leaderless)
    last = RequestTimedOutError("slow")
    assert missing_partition_error(view, [TopicPartition("t", 1)], last) is last


async def test_admin_arguments_are_checked_before_any_request() -> None:
    admin = AsyncAdmin(NOWHERE, request_timeout_ms=100)
    with pytest.raises(TypeError, match="topic names or NewTopic"):
        await admin.create_topics(5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="num_partitions must be an int"):
        await admin.create_topics(NewTopic("t", "2", 1))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="replication_factor must be an int"):
        await admin.create_topics(NewTopic("t", 1, None))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"the value of config 'retention.ms' must be a str"):
        await admin.create_topics("t", configs={"retention.ms": [1]})  # type: ignore[dict-item]
    with pytest.raises(TypeError, match="topic names must be str"):
        await admin.delete_topics([1])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="list of TopicPartition"):
        await admin.elect_leaders("preferred", TopicPartition("t", 0))  # type: ignore[arg-type]
    await admin.close()
    with pytest.raises(IllegalStateError, match="admin client is closed"):
        await admin.list_topics()


def test_a_closed_sync_admin_raises_a_clear_error() -> None:
    admin = Admin(NOWHERE)
    admin.close()
    with pytest.raises(IllegalStateError, match="admin client is closed"):
        admin.list_topics()
