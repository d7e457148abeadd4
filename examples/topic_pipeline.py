"""Read a topic, count records per key, write the counts to another topic: a
topic-to-topic Spark Structured Streaming job on minikafka's source and sink.

Every micro-batch writes the whole count table (output mode `complete`; PySpark's
Python data sources have no `update` mode) to the output topic as records with the key
and its running count as value, so the newest record per key holds its count. Run it
against a local cluster:

    .venv/bin/minikafka dev                                   # terminal 1: 127.0.0.1:9092
    .venv/bin/minikafka topic create clicks --partitions 3 --replication-factor 3 \\
        --bootstrap-server 127.0.0.1:9092
    .venv/bin/minikafka topic create click-counts --partitions 3 --replication-factor 3 \\
        --bootstrap-server 127.0.0.1:9092
    printf 'alice:1\\nbob:2\\nalice:3\\n' | .venv/bin/minikafka produce --topic clicks \\
        --key-separator : --bootstrap-server 127.0.0.1:9092
    PYSPARK_PYTHON=.venv/bin/python .venv/bin/python examples/topic_pipeline.py \\
        --bootstrap-server 127.0.0.1:9092 --input clicks --output click-counts \\
        --checkpoint /tmp/click-counts --available-now

On a Spark cluster, submit it (every executor needs Python 3.11 with `minikafka[spark]`
installed, and the checkpoint directory on storage the driver and all executors share):

    spark-submit --master spark://HOST:7077 examples/topic_pipeline.py \
        --bootstrap-server broker-1:9092 --input clicks --output click-counts \
        --checkpoint /shared/click-counts

`--master` picks the master when the script is started with plain python (default
`local[2]`); under spark-submit, spark-submit's `--master` applies.
`--available-now` processes what is committed now and exits; without it the job runs
until Ctrl-C. Restarting with the same `--checkpoint` resumes where it stopped. The
sink is at-least-once: after a failure a micro-batch may be written twice, which for
running counts only repeats a record with the same count. Needs the `spark` extra and
Java 17.
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

from client.spark import MiniKafkaDataSource

logger = logging.getLogger(__name__)

#: Set by spark-submit for the Python driver it starts (its --master and --conf then apply).
SUBMITTED_ENV = "PYSPARK_GATEWAY_PORT"


def counts_per_key(stream: DataFrame) -> DataFrame:
    """Running count per key as sink rows: `key` (the input key, "<null>" for none) and
    `value` (the count as text)."""
    key = F.coalesce(F.col("key").cast("string"), F.lit("<null>")).alias("key")
    counts = stream.groupBy(key).count()
    return counts.select("key", F.col("count").cast("string").alias("value"))


def start_pipeline(
    spark: SparkSession,
    *,
    bootstrap: str,
    input_topic: str,
    output_topic: str,
    checkpoint: Path,
    available_now: bool,
    max_offsets_per_trigger: int | None = None,
) -> StreamingQuery:
    """Start the read -> count -> write query (the data source is registered here)."""
    spark.dataSource.register(MiniKafkaDataSource)
    reader = (
        spark.readStream.format("minikafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", input_topic)
        .option("startingOffsets", "earliest")
    )
    if max_offsets_per_trigger is not None:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    writer = (
        counts_per_key(reader.load())
        .writeStream.outputMode("complete")
        .format("minikafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", output_topic)
        .option("checkpointLocation", str(checkpoint))
    )
    if available_now:
        return writer.trigger(availableNow=True).start()
    return writer.trigger(processingTime="1 second").start()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--bootstrap-server", default="127.0.0.1:9092")
    parser.add_argument("--input", required=True, help="topic to read")
    parser.add_argument("--output", required=True, help="topic to write the counts to")
    parser.add_argument("--checkpoint", type=Path, required=True, help="checkpoint directory")
    parser.add_argument("--max-offsets-per-trigger", type=int, default=None)
    parser.add_argument("--available-now", action="store_true")
    parser.add_argument(
        "--master", default=None, help="Spark master (default: spark-submit's, else local[2])"
    )
    args = parser.parse_args(argv)

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName("minikafka-topic-pipeline")
    if args.master is not None:
        builder = builder.master(args.master)
    elif SUBMITTED_ENV not in os.environ:  # plain python: no spark-submit gave a master
        builder = builder.master("local[2]").config("spark.sql.shuffle.partitions", "2")
    spark = builder.getOrCreate()
    query = start_pipeline(
        spark,
        bootstrap=args.bootstrap_server,
        input_topic=args.input,
        output_topic=args.output,
        checkpoint=args.checkpoint,
        available_now=args.available_now,
        max_offsets_per_trigger=args.max_offsets_per_trigger,
    )
    try:
        query.awaitTermination()
    except KeyboardInterrupt:
        logger.info("stopping")
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
