"""The minikafka Spark sink against a real 3-broker cluster (issue 24, Deliver 1).

One SparkSession and one cluster are shared (see conftest); each test has its own topics.
"""

from __future__ import annotations

import collections
import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from minikafka.errors import ErrorCode
from minikafka.v1 import broker_pb2
from tests.spark.conftest import bootstrap, produce_values, stream_options
from tests.support.cluster import Cluster, wait_until

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]


def committed_end(cluster: Cluster, topic: str, partition: int) -> int | None:
    """The partition's high watermark, or None while the leader cannot tell: it moved,
    or a new leader's HW has not reached the start of its epoch yet (KIP-207)."""
    leader, _, _ = cluster.leader_of(topic, partition)
    if leader not in cluster.brokers or not cluster.brokers[leader].alive():
        return None
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
    part = reply.partitions[0]
    if part.error_code in (ErrorCode.OFFSET_NOT_AVAILABLE, ErrorCode.NOT_LEADER_OR_FOLLOWER):
        return None
    assert part.error_code == ErrorCode.NONE, part.error_message
    return part.offset


def read_topic(spark: SparkSession, cluster: Cluster, topic: str) -> list[Any]:
    return (
        spark.read.format("minikafka")
        .option("kafka.bootstrap.servers", bootstrap(cluster))
        .option("subscribe", topic)
        .option("includeHeaders", "true")
        .load()
        .collect()
    )


def test_batch_write_then_read_returns_the_same_rows(spark: SparkSession, cluster: Cluster) -> None:
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        StringType,
        StructField,
        StructType,
    )

    topic = "sinkbatch"
    cluster.create_topic(topic, partitions=3, rf=3)
    header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
    schema = StructType(
        [
            StructField("key", BinaryType()),
            StructField("value", BinaryType()),
            StructField("partition", IntegerType()),
            StructField("headers", ArrayType(header)),
        ]
    )
    rows = [
        (
            None if i % 5 == 0 else b"k%d" % (i % 7),
            b"v%03d" % i,
            i % 3,
            None if i % 4 == 0 else [("n", b"%d" % i), ("tag", b"x")],
        )
        for i in range(60)
    ]
    df = spark.createDataFrame(rows, schema).repartition(4)
    (
        df.write.format("minikafka")
        .option("kafka.bootstrap.servers", bootstrap(cluster))
        .option("topic", topic)
        .option("kafka.linger.ms", "2")
        .mode("append")
        .save()
    )
    got = read_topic(spark, cluster, topic)
    written = [
        (r.key, r.value, r.partition, None if r.headers is None else [tuple(h) for h in r.headers])
        for r in got
    ]
    assert sorted(written, key=repr) == sorted(rows, key=repr)
    assert {r.topic for r in got} == {topic}
    for partition in range(3):  # rows of one partition keep their order within each task
        offsets = sorted(r.offset for r in got if r.partition == partition)
        assert offsets == list(range(20))


def test_topic_column_and_string_columns(spark: SparkSession, cluster: Cluster) -> None:
    cluster.create_topic("sink-a", rf=3)
    cluster.create_topic("sink-b", rf=3)
    df = spark.createDataFrame(
        [("sink-a" if i % 2 else "sink-b", f"key{i}", f"value{i}") for i in range(10)],
        "topic string, key string, value string",
    )
    (
        df.write.format("minikafka")
        .option("kafka.bootstrap.servers", bootstrap(cluster))
        .option("kafka.compression.type", "gzip")
        .option("kafka.linger.ms", "0")
        .mode("append")
        .save()
    )
    a = read_topic(spark, cluster, "sink-a")
    b = read_topic(spark, cluster, "sink-b")
    assert sorted((r.key, r.value) for r in a) == [
        (b"key%d" % i, b"value%d" % i) for i in range(1, 10, 2)
    ]
    assert sorted((r.key, r.value) for r in b) == [
        (b"key%d" % i, b"value%d" % i) for i in range(0, 10, 2)
    ]


@pytest.mark.parametrize(
    ("columns", "options", "match"),
    [
        ("key binary", {"topic": "t"}, "no value column"),
        ("value int", {"topic": "t"}, "column 'value' has type int"),
        ("value binary", {}, "no topic: set the topic option"),
        ("value binary, partition string", {"topic": "t"}, "column 'partition' has type"),
        ("value binary", {"topic": "t", "kafka.lingerms": "5"}, "unknown option 'kafka.lingerms'"),
        ("value binary", {"topic": "t", "kafka.acks": "2"}, "acks must be 0, 1, -1 or 'all'"),
    ],
)
def test_bad_sink_input_fails_with_a_clear_message(
    spark: SparkSession, cluster: Cluster, columns: str, options: dict[str, str], match: str
) -> None:
    df = spark.createDataFrame([], columns)
    with pytest.raises(Exception, match=match):
        df.write.format("minikafka").option("kafka.bootstrap.servers", bootstrap(cluster)).options(
            **options
        ).mode("append").save()


def test_only_append_writes(spark: SparkSession, cluster: Cluster) -> None:
    df = spark.createDataFrame([(b"v",)], "value binary")
    options = {"kafka.bootstrap.servers": bootstrap(cluster), "topic": "t"}
    with pytest.raises(Exception, match="only appends to topics: use mode"):
        df.write.format("minikafka").options(**options).mode("overwrite").save()
    with pytest.raises(Exception, match="UNSUPPORTED_DATA_SOURCE_SAVE_MODE"):
        df.write.format("minikafka").options(**options).save()  # Spark's default mode


def test_a_delivery_error_fails_the_write(spark: SparkSession, cluster: Cluster) -> None:
    cluster.create_topic("sink-onepart", rf=3)
    df = spark.createDataFrame([(b"v", 5)], "value binary, partition int")
    with pytest.raises(Exception, match="partition 5"):
        df.write.format("minikafka").option("kafka.bootstrap.servers", bootstrap(cluster)).option(
            "topic", "sink-onepart"
        ).mode("append").save()
    missing = spark.createDataFrame([(b"v",)], "value binary")
    with pytest.raises(Exception, match="'sink-no-such-topic' does not exist"):
        missing.write.format("minikafka").option(
            "kafka.bootstrap.servers", bootstrap(cluster)
        ).option("topic", "sink-no-such-topic").option("kafka.max.block.ms", "1000").mode(
            "append"
        ).save()


def test_streaming_topic_to_topic_survives_a_broker_kill(
    spark: SparkSession, cluster: Cluster, tmp_path: Path
) -> None:
    source, sink = "pipe-in", "pipe-out"
    cluster.create_topic(source, partitions=2, rf=3, min_insync_replicas="2")
    cluster.create_topic(sink, partitions=2, rf=3, min_insync_replicas="2")
    expected = [b"m%04d" % i for i in range(400)]
    for chunk in range(0, 300, 20):
        produce_values(cluster, source, expected[chunk : chunk + 20], partition=(chunk // 20) % 2)
    query = (
        spark.readStream.format("minikafka")
        .options(**stream_options(cluster, source, maxOffsetsPerTrigger="25"))
        .load()
        .selectExpr("key", "value")
        .writeStream.format("minikafka")
        .option("kafka.bootstrap.servers", bootstrap(cluster))
        .option("topic", sink)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )

    def sink_size() -> int:
        """Committed records in the sink topic; 0 while a partition's HW is unknown."""
        ends = [committed_end(cluster, sink, p) for p in range(2)]
        return 0 if None in ends else sum(e for e in ends if e is not None)

    victim = cluster.wait_leader(sink, 0)
    try:
        wait_until(lambda: sink_size() >= 50, timeout_s=120, what="the first micro-batch")
        # Killed while the query works through the backlog, 25 records a micro-batch;
        # records produced afterwards can only reach the sink through the new leaders.
        at_kill = sink_size()
        cluster.brokers[victim].kill()
        cluster.wait_leader(sink, 0, not_in=(victim,))
        for chunk in range(300, 400, 20):
            produce_values(
                cluster, source, expected[chunk : chunk + 20], partition=(chunk // 20) % 2
            )
        wait_until(lambda: sink_size() >= 400, timeout_s=180, what="all 400 records")
        # The source's last micro-batch is committed once the sink has acknowledged it.
        wait_until(
            lambda: query.lastProgress is not None and not query.status["isDataAvailable"],
            timeout_s=60,
            what="the query to go idle",
        )
        assert query.exception() is None
    finally:
        query.stop()
        cluster.brokers[victim].start()
    values = [r.value for r in read_topic(spark, cluster, sink)]
    counts = collections.Counter(values)
    missing = sorted(set(expected) - set(counts))
    duplicates = sum(n - 1 for n in counts.values())
    print(
        f"streaming sink across a broker kill (sink had {at_kill} rows at the kill): "
        f"{len(values)} rows, {duplicates} duplicates"
    )
    assert not missing, f"lost {len(missing)} records: {missing[:10]}"
    assert set(counts) == set(expected)
    cluster.wait_isr(sink, 0, sorted(cluster.brokers))
    cluster.wait_isr(sink, 1, sorted(cluster.brokers))


def load_example(name: str) -> Any:
    path = Path(__file__).resolve().parents[2] / "examples" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"examples_{name}", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_example_topic_pipeline_counts_keys_into_a_topic(
    spark: SparkSession, cluster: Cluster, tmp_path: Path
) -> None:
    pipeline = load_example("topic_pipeline")
    cluster.create_topic("clicks", partitions=2, rf=3)
    cluster.create_topic("click-counts", partitions=2, rf=3)
    for key, count in ((b"alice", 3), (b"bob", 2)):
        produce_values(cluster, "clicks", [b"x"] * count, key=key)
    produce_values(cluster, "clicks", [b"y"], partition=1)  # no key
    options = {
        "bootstrap": bootstrap(cluster),
        "input_topic": "clicks",
        "output_topic": "click-counts",
        "checkpoint": tmp_path / "ckpt",
        "available_now": True,
    }
    query = pipeline.start_pipeline(spark, **options)
    assert query.awaitTermination(120), "the pipeline did not finish"
    produce_values(cluster, "clicks", [b"z"], key=b"bob")
    query = pipeline.start_pipeline(spark, **options)  # resumes from its checkpoint
    assert query.awaitTermination(120), "the restarted pipeline did not finish"
    rows = sorted(read_topic(spark, cluster, "click-counts"), key=lambda r: r.offset)
    latest = {r.key: r.value for r in rows}  # one key, one partition: newest is last
    assert latest == {b"alice": b"3", b"bob": b"3", b"<null>": b"1"}
