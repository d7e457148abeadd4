"""Source options of issue 24 (Deliver 2) against a real cluster: offsets by timestamp,
maxRecordsPerPartition, and `kafka.*` consumer settings."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from client.spark.progress import source_metrics
from tests.spark.conftest import bootstrap, produce_values, run_available_now, stream_options
from tests.support.cluster import Cluster, wait_until

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.timeout(240)]

#: Three record batches per partition, one second apart (offsets 0-3, 4-7, 8-11).
T0 = 1_700_000_000_000


def produce_three_seconds(cluster: Cluster, topic: str, partitions: int) -> None:
    for partition in range(partitions):
        for second in range(3):
            produce_values(
                cluster,
                topic,
                [b"p%d-s%d-%d" % (partition, second, i) for i in range(4)],
                partition=partition,
                timestamp_ms=T0 + second * 1000,
            )


def batch_read(spark: SparkSession, cluster: Cluster, topic: str, **options: str) -> Any:
    return (
        spark.read.format("minikafka")
        .option("kafka.bootstrap.servers", bootstrap(cluster))
        .option("subscribe", topic)
        .options(**options)
        .load()
    )


def offsets_of(rows: list[Any]) -> list[tuple[int, int]]:
    return sorted((r.partition, r.offset) for r in rows)


def test_offsets_by_timestamp(spark: SparkSession, cluster: Cluster, tmp_path: Path) -> None:
    topic = "bytime"
    cluster.create_topic(topic, partitions=2, rf=3)
    produce_three_seconds(cluster, topic, 2)

    # One time for every partition: from the second batch up to (not including) the third.
    rows = batch_read(
        spark,
        cluster,
        topic,
        startingTimestamp=str(T0 + 1000),
        endingTimestamp=str(T0 + 2000),
    ).collect()
    assert offsets_of(rows) == [(p, o) for p in range(2) for o in range(4, 8)]

    # One time per partition; a time past every record ends at the latest offset.
    rows = batch_read(
        spark,
        cluster,
        topic,
        startingOffsetsByTimestamp=json.dumps({topic: {"0": T0, "1": T0 + 1500}}),
        endingOffsetsByTimestamp=json.dumps({topic: {"0": T0 + 500, "1": T0 + 99_000}}),
    ).collect()
    assert offsets_of(rows) == [(0, o) for o in range(4)] + [(1, o) for o in range(8, 12)]

    # No record that recent: fail naming the partitions, or start at the end.
    with pytest.raises(Exception, match=rf"no record at or after the given time in {topic}-0"):
        batch_read(spark, cluster, topic, startingTimestamp=str(T0 + 99_000)).collect()
    rows = batch_read(
        spark,
        cluster,
        topic,
        startingTimestamp=str(T0 + 99_000),
        startingOffsetsByTimestampStrategy="latest",
    ).collect()
    assert rows == []

    # A stream starting at a time.
    options = stream_options(cluster, topic, startingTimestamp=str(T0 + 2000))
    del options["startingOffsets"]
    streamed = [r for b in run_available_now(spark, options, tmp_path / "ckpt") for r in b]
    assert offsets_of(streamed) == [(p, o) for p in range(2) for o in range(8, 12)]


def test_max_records_per_partition_splits_tasks(spark: SparkSession, cluster: Cluster) -> None:
    topic = "maxrecords"
    cluster.create_topic(topic, partitions=2, rf=3)
    produce_values(cluster, topic, [b"a%d" % i for i in range(10)], partition=0)
    produce_values(cluster, topic, [b"b%d" % i for i in range(3)], partition=1)
    df = batch_read(spark, cluster, topic, maxRecordsPerPartition="4")
    assert df.rdd.getNumPartitions() == 4  # 10 -> 4 + 3 + 3, 3 -> 3
    rows = df.collect()
    assert offsets_of(rows) == [(0, o) for o in range(10)] + [(1, o) for o in range(3)]
    df = batch_read(spark, cluster, topic, maxRecordsPerPartition="4", minPartitions="8")
    assert df.rdd.getNumPartitions() >= 8
    assert offsets_of(df.collect()) == offsets_of(rows)


def test_kafka_consumer_settings_reach_the_reader(spark: SparkSession, cluster: Cluster) -> None:
    topic = "consumerconf"
    cluster.create_topic(topic, rf=3)
    for chunk in range(5):
        produce_values(cluster, topic, [b"x" * 100 + b"%d" % (chunk * 10 + i) for i in range(10)])
    # A fetch that holds about one record batch: the reader still reads everything,
    # a batch at a time.
    rows = batch_read(
        spark,
        cluster,
        topic,
        **{
            "kafka.max.partition.fetch.bytes": "64",
            "kafka.fetch.max.bytes": "64",
            "kafka.fetch.max.wait.ms": "10",
            "kafka.request.timeout.ms": "3000",
            "kafka.group.id": "ignored",
        },
    ).collect()
    assert [r.offset for r in sorted(rows, key=lambda r: r.offset)] == list(range(50))
    with pytest.raises(Exception, match=r"unknown option 'kafka\.max\.poll\.records'"):
        batch_read(spark, cluster, topic, **{"kafka.max.poll.records": "5"}).collect()


def test_min_offsets_per_trigger_holds_small_batches_back(
    spark: SparkSession, cluster: Cluster, tmp_path: Path
) -> None:
    topic = "minoffsets"
    cluster.create_topic(topic, rf=3)
    produce_values(cluster, topic, [b"a%d" % i for i in range(5)])
    batches: list[list[Any]] = []
    lock = threading.Lock()

    def collect(df: Any, batch_id: int) -> None:
        rows = df.collect()
        with lock:
            batches.append(rows)

    def batch_sizes() -> list[int]:
        with lock:
            return [len(b) for b in batches]

    # Every trigger reports progress, so triggers that were held back can be counted.
    spark.conf.set("spark.sql.streaming.noDataProgressEventInterval", "0")
    options = stream_options(cluster, topic, minOffsetsPerTrigger="10", maxTriggerDelay="10m")
    query = (
        spark.readStream.format("minikafka")
        .options(**options)
        .load()
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    try:
        # The first trigger runs whatever it finds (as Spark's Kafka source).
        wait_until(lambda: batch_sizes() == [5], timeout_s=120, what="the first batch")
        produce_values(cluster, topic, [b"b%d" % i for i in range(4)])
        seen = len(query.recentProgress)
        wait_until(
            lambda: len(query.recentProgress) >= seen + 5, timeout_s=60, what="5 more triggers"
        )
        assert batch_sizes() == [5], "4 new records < minOffsetsPerTrigger=10 must wait"
        produce_values(cluster, topic, [b"c%d" % i for i in range(6)])
        wait_until(lambda: len(batch_sizes()) == 2, timeout_s=60, what="the second batch")
        assert batch_sizes() == [5, 10]
        assert query.exception() is None
    finally:
        query.stop()
        spark.conf.unset("spark.sql.streaming.noDataProgressEventInterval")


def test_progress_gives_spark_kafka_source_metrics(
    spark: SparkSession, cluster: Cluster, tmp_path: Path
) -> None:
    topic = "progressmetrics"
    cluster.create_topic(topic, partitions=2, rf=3)
    produce_values(cluster, topic, [b"a%d" % i for i in range(10)], partition=0)
    produce_values(cluster, topic, [b"b%d" % i for i in range(2)], partition=1)

    def count_rows(df: Any, batch_id: int) -> None:
        df.count()

    query = (
        spark.readStream.format("minikafka")
        .options(**stream_options(cluster, topic, maxOffsetsPerTrigger="4"))
        .load()
        .writeStream.foreachBatch(count_rows)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(120), "AvailableNow query did not finish"
        progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
    finally:
        query.stop()
    metrics = [source_metrics(p["sources"][0]) for p in progress]
    # Lags 10 and 2 prorated over 4 rows a batch (Spark's rule): the batches end at
    # {0: 3, 1: 1}, {0: 6, 1: 2}, {0: 10, 1: 2}.
    assert [m["maxOffsetsBehindLatest"] for m in metrics] == ["7", "4", "0"]
    assert [m["minOffsetsBehindLatest"] for m in metrics] == ["1", "0", "0"]
    assert metrics[0]["avgOffsetsBehindLatest"] == "4.0"
    assert metrics[-1] == {
        "minOffsetsBehindLatest": "0",
        "maxOffsetsBehindLatest": "0",
        "avgOffsetsBehindLatest": "0.0",
        "truncatedRecords": "0",
    }
