"""The minikafka Spark source against a real 3-broker cluster (issue 8 acceptance).

One SparkSession and one cluster are shared (see conftest); each test has its own topic.
"""

from __future__ import annotations

import datetime as dt
import json
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from client.spark.offsets import EPOCHS_KEY
from minikafka.errors import ErrorCode
from minikafka.v1 import broker_pb2
from tests.spark.conftest import bootstrap, produce_values, run_available_now, stream_options
from tests.support.cluster import Cluster, wait_until

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.timeout(240)]


def high_watermark(cluster: Cluster, topic: str, partition: int = 0) -> int:
    leader = cluster.wait_leader(topic, partition)
    reply = cluster.stub(leader).ListOffsets(
        broker_pb2.ListOffsetsRequest(
            partitions=[
                broker_pb2.ListOffsetsPartition(
                    topic=topic, partition=partition, timestamp_ms=-1, current_leader_epoch=-1
                )
            ]
        ),
        timeout=5,
    )
    assert reply.partitions[0].error_code == ErrorCode.NONE, reply.partitions[0].error_message
    return reply.partitions[0].offset


def offsets_of(rows: list[Any]) -> list[tuple[int, int]]:
    return sorted((r.partition, r.offset) for r in rows)


def test_uncommitted_records_are_not_read_until_committed(
    spark: SparkSession, cluster: Cluster, tmp_path: Path
) -> None:
    topic = "uncommitted"
    cluster.create_topic(topic, rf=3, min_insync_replicas="2")
    produce_values(cluster, topic, [b"c%d" % i for i in range(5)])
    leader = cluster.wait_leader(topic)
    followers = [b for b in cluster.brokers if b != leader]
    for broker_id in followers:
        cluster.brokers[broker_id].pause()
    try:
        base = produce_values(cluster, topic, [b"u%d" % i for i in range(3)], acks=1)
        assert base == 5
        assert high_watermark(cluster, topic) == 5  # appended on the leader, not committed
        options = {
            **stream_options(cluster, topic),
            "kafka.bootstrap.servers": cluster.brokers[leader].address,
        }
        rows = [r for b in run_available_now(spark, options, tmp_path / "ckpt") for r in b]
        assert [r.offset for r in rows] == [0, 1, 2, 3, 4]
        assert [r.value for r in rows] == [b"c%d" % i for i in range(5)]
        batch = spark.read.format("minikafka").options(**options).load().collect()
        assert sorted(r.offset for r in batch) == [0, 1, 2, 3, 4]
    finally:
        for broker_id in followers:
            cluster.brokers[broker_id].resume()
    wait_until(lambda: high_watermark(cluster, topic) == 8, timeout_s=30, what="HW 8")
    rows = [r for b in run_available_now(spark, options, tmp_path / "ckpt") for r in b]
    assert [r.offset for r in rows] == [5, 6, 7]
    assert [r.value for r in rows] == [b"u0", b"u1", b"u2"]
    cluster.wait_isr(topic, 0, sorted(cluster.brokers))


def test_max_offsets_per_trigger_and_restart_from_checkpoint(
    spark: SparkSession, cluster: Cluster, tmp_path: Path
) -> None:
    topic = "bounded"
    cluster.create_topic(topic, partitions=2, rf=3)
    produce_values(cluster, topic, [b"a%d" % i for i in range(10)], partition=0)
    produce_values(cluster, topic, [b"b%d" % i for i in range(4)], partition=1)
    options = stream_options(cluster, topic, maxOffsetsPerTrigger="5")

    first = run_available_now(spark, options, tmp_path / "ckpt")
    assert len(first) >= 3, [len(b) for b in first]
    assert all(len(b) <= 5 for b in first), [len(b) for b in first]
    rows = [r for b in first for r in b]
    assert offsets_of(rows) == [(0, i) for i in range(10)] + [(1, i) for i in range(4)]

    # More data, then the same query restarted from its checkpoint: no gap, no duplicate.
    produce_values(cluster, topic, [b"a%d" % i for i in range(10, 16)], partition=0)
    produce_values(cluster, topic, [b"b%d" % i for i in range(4, 6)], partition=1)
    second = run_available_now(spark, options, tmp_path / "ckpt")
    assert all(len(b) <= 5 for b in second), [len(b) for b in second]
    again = [r for b in second for r in b]
    assert offsets_of(again) == [(0, i) for i in range(10, 16)] + [(1, i) for i in range(4, 6)]
    assert sorted(r.value for r in rows + again) == sorted(
        [b"a%d" % i for i in range(16)] + [b"b%d" % i for i in range(6)]
    )
    offsets = json.loads((tmp_path / "ckpt" / "offsets" / "0").read_text().splitlines()[-1])
    assert list(offsets) == [EPOCHS_KEY, topic]
    assert list(offsets[topic]) == ["0", "1"]
    assert list(offsets[EPOCHS_KEY][topic]) == ["0", "1"]


def test_batch_read_with_offsets_headers_and_min_partitions(
    spark: SparkSession, cluster: Cluster
) -> None:
    topic = "batchread"
    cluster.create_topic(topic, rf=3)
    ts = 1_700_000_000_000
    produce_values(cluster, topic, [b"v0", b"v1"], timestamp_ms=ts)
    produce_values(
        cluster, topic, [b"v2", b"v3", b"v4"], key=b"k", headers=[("h", b"x")], timestamp_ms=ts
    )
    produce_values(cluster, topic, [b"v5"], timestamp_ms=ts)
    df = (
        spark.read.format("minikafka")
        .option("bootstrap.servers", bootstrap(cluster))
        .option("subscribe", topic)
        .option("startingOffsets", json.dumps({topic: {"0": 1}}))
        .option("endingOffsets", json.dumps({topic: {"0": 5}}))
        .option("includeHeaders", "true")
        .option("minPartitions", "4")
        .load()
    )
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
        "timestamp:timestamp,timestampType:int,headers:array<struct<key:string,value:binary>>>"
    )
    assert df.rdd.getNumPartitions() == 4
    rows = sorted(df.collect(), key=lambda r: r.offset)
    assert [r.offset for r in rows] == [1, 2, 3, 4]
    assert [r.value for r in rows] == [b"v1", b"v2", b"v3", b"v4"]
    assert [r.key for r in rows] == [None, b"k", b"k", b"k"]
    assert rows[0].headers is None
    assert [(h.key, h.value) for h in rows[1].headers] == [("h", b"x")]
    assert {r.topic for r in rows} == {topic}
    assert {r.timestampType for r in rows} == {0}
    utc = dt.UTC
    assert rows[0].timestamp.replace(tzinfo=utc) == dt.datetime.fromtimestamp(
        (ts + 1) / 1000, tz=utc
    )


def test_bad_options_fail_with_a_clear_message(spark: SparkSession, cluster: Cluster) -> None:
    with pytest.raises(Exception, match="exactly one of subscribe, subscribePattern or assign"):
        spark.read.format("minikafka").option(
            "kafka.bootstrap.servers", bootstrap(cluster)
        ).load().collect()


def test_leader_kill_during_the_stream_changes_nothing(
    spark: SparkSession, cluster: Cluster, tmp_path: Path
) -> None:
    topic = "failover"
    cluster.create_topic(topic, rf=3, min_insync_replicas="2")
    expected = [b"r%03d" % i for i in range(100)]
    for chunk in range(6):
        produce_values(cluster, topic, expected[chunk * 10 : chunk * 10 + 10])
    rows: list[Any] = []
    lock = threading.Lock()

    def collect(df: Any, batch_id: int) -> None:
        got = df.collect()
        with lock:
            rows.extend(got)

    def seen() -> int:
        with lock:
            return len(rows)

    query = (
        spark.readStream.format("minikafka")
        .options(**stream_options(cluster, topic, maxOffsetsPerTrigger="20"))
        .load()
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    leader = cluster.wait_leader(topic)
    try:
        wait_until(lambda: seen() >= 20, timeout_s=90, what="the first micro-batch")
        cluster.brokers[leader].kill()
        cluster.wait_leader(topic, not_in=(leader,))
        for chunk in range(6, 10):
            produce_values(cluster, topic, expected[chunk * 10 : chunk * 10 + 10])
        wait_until(lambda: seen() >= 100, timeout_s=120, what="all 100 records")
        assert query.exception() is None
    finally:
        query.stop()
        cluster.brokers[leader].start()
    assert [r.offset for r in sorted(rows, key=lambda r: r.offset)] == list(range(100))
    assert [r.value for r in sorted(rows, key=lambda r: r.offset)] == expected
    cluster.wait_isr(topic, 0, sorted(cluster.brokers))
