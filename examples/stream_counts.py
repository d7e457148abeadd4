"""Count records per key from a minikafka topic with Spark Structured Streaming.

Writes the running counts to the console and every micro-batch's records (key, value,
partition, offset, timestamp) to a Parquet sink. Run it against a local cluster:

    .venv/bin/minikafka dev                                   # terminal 1: 127.0.0.1:9092
    .venv/bin/minikafka topic create clicks --partitions 3 --replication-factor 3 \\
        --bootstrap-server 127.0.0.1:9092
    printf 'alice:1\\nbob:2\\nalice:3\\n' | .venv/bin/minikafka produce --topic clicks \\
        --key-separator : --bootstrap-server 127.0.0.1:9092
    PYSPARK_PYTHON=.venv/bin/python .venv/bin/python examples/stream_counts.py \\
        --bootstrap-server 127.0.0.1:9092 --topic clicks --output /tmp/clicks

`--available-now` processes what is committed now and exits (handy in scripts and CI);
without it the job runs until Ctrl-C. Restarting with the same `--output` resumes from
its checkpoints without gaps or duplicates. Needs the `spark` extra and Java 17.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery
from pyspark.sql.streaming.readwriter import DataStreamWriter

from client.spark import MiniKafkaDataSource

logger = logging.getLogger(__name__)


def records(spark: SparkSession, bootstrap: str, topic: str, max_offsets: int | None) -> DataFrame:
    """The topic as a stream with Spark's Kafka schema (the README's five lines)."""
    spark.dataSource.register(MiniKafkaDataSource)
    reader = (
        spark.readStream.format("minikafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
    )
    if max_offsets is not None:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets))
    return reader.load()


def counts_per_key(stream: DataFrame) -> DataFrame:
    """Running count of records per key (null keys count as the key "<null>")."""
    key = F.coalesce(F.col("key").cast("string"), F.lit("<null>")).alias("key")
    return stream.groupBy(key).count().orderBy(F.desc("count"), "key")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--bootstrap-server", default="127.0.0.1:9092")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--output", type=Path, required=True, help="Parquet sink + checkpoints")
    parser.add_argument("--max-offsets-per-trigger", type=int, default=None)
    parser.add_argument("--available-now", action="store_true")
    args = parser.parse_args(argv)

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("minikafka-stream-counts")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    stream = records(spark, args.bootstrap_server, args.topic, args.max_offsets_per_trigger)

    def start(writer: DataStreamWriter) -> StreamingQuery:
        if args.available_now:
            return writer.trigger(availableNow=True).start()
        return writer.trigger(processingTime="1 second").start()

    console = start(
        counts_per_key(stream)
        .writeStream.outputMode("complete")
        .format("console")
        .option("truncate", "false")
        .option("checkpointLocation", str(args.output / "_checkpoints" / "console"))
    )
    parquet = start(
        stream.select(
            F.col("key").cast("string").alias("key"),
            F.col("value").cast("string").alias("value"),
            "partition",
            "offset",
            "timestamp",
        )
        .writeStream.format("parquet")
        .option("path", str(args.output / "records"))
        .option("checkpointLocation", str(args.output / "_checkpoints" / "parquet"))
    )
    try:
        for query in (console, parquet):
            query.awaitTermination()
    except KeyboardInterrupt:
        logger.info("stopping")
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
