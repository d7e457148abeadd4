"""Consumer API additions against a real standalone broker: offsets_for_times,
pause/resume/paused, isolation_level, metrics()."""

from __future__ import annotations

import pytest

from client import Admin, Consumer, NewTopic, OffsetAndTimestamp, Producer, TopicPartition
from client.errors import KafkaConfigurationError
from tests.integration.conftest import StandaloneBroker

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


def setup_topic(broker: StandaloneBroker, name: str, partitions: int = 1) -> None:
    with Admin(broker.bootstrap) as admin:
        admin.create_topics(NewTopic(name, partitions, 1))


def test_offsets_for_times(standalone_broker: StandaloneBroker) -> None:
    setup_topic(standalone_broker, "times")
    tp = TopicPartition("times", 0)
    with Producer(bootstrap_servers=standalone_broker.bootstrap) as producer:
        for ts in (1000, 2000, 3000):
            producer.send("times", b"v", partition=0, timestamp_ms=ts).result(10)
    with Consumer(bootstrap_servers=standalone_broker.bootstrap) as consumer:
        found = consumer.offsets_for_times({tp: 1500})
        assert found == {tp: OffsetAndTimestamp(1, 2000, found[tp].leader_epoch)}  # type: ignore[union-attr]
        assert consumer.offsets_for_times({tp: 0})[tp].offset == 0  # type: ignore[union-attr]
        assert consumer.offsets_for_times({tp: 5000}) == {tp: None}
        with pytest.raises(ValueError, match="must be an int >= 0"):
            consumer.offsets_for_times({tp: -1})


def test_pause_and_resume(standalone_broker: StandaloneBroker) -> None:
    setup_topic(standalone_broker, "pausing", partitions=2)
    tp0, tp1 = TopicPartition("pausing", 0), TopicPartition("pausing", 1)
    with Producer(bootstrap_servers=standalone_broker.bootstrap) as producer:
        for partition in (0, 1):
            producer.send_batch("pausing", [b"a", b"b"], partition=partition).result(10)
    with Consumer(
        bootstrap_servers=standalone_broker.bootstrap,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
    ) as consumer:
        consumer.assign([tp0, tp1])
        consumer.pause(tp0)
        assert consumer.paused() == {tp0}
        seen: dict[TopicPartition, int] = {}
        for _ in range(20):
            for tp, records in consumer.poll(timeout_ms=200).items():
                seen[tp] = seen.get(tp, 0) + len(records)
            if seen.get(tp1) == 2:
                break
        assert seen == {tp1: 2}
        assert consumer.position(tp0) == 0
        consumer.resume(tp0)
        assert consumer.paused() == set()
        for _ in range(20):
            for tp, records in consumer.poll(timeout_ms=200).items():
                seen[tp] = seen.get(tp, 0) + len(records)
            if seen.get(tp0) == 2:
                break
        assert seen == {tp0: 2, tp1: 2}
        report = consumer.metrics()["consumer-fetch-manager-metrics"]
    assert report["records-consumed-total"] == 4
    assert report["fetch-total"] >= 1
    assert report["bytes-consumed-total"] > 0


def test_isolation_level_is_checked() -> None:
    with pytest.raises(KafkaConfigurationError, match="isolation_level must be"):
        Consumer(bootstrap_servers="127.0.0.1:1", isolation_level="read_dirty")
