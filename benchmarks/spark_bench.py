"""Spark sink throughput: rows/s that `df.write.format("minikafka")` puts into an RF=3
acks=all topic, measured next to the producer's own bulk path (`Producer.send_batch`) and
`send()` on the same cluster, in the same run.

Runs in a spawned worker (`benchmarks.harness.in_worker`): a `local[TASKS]` SparkSession, a
cached DataFrame of `rows` values of `record_bytes` (built before the clock starts), then
a warm-up and `runs` timed batch writes of the whole DataFrame into a fresh one-partition
topic (the producer cases' layout), each timed from `save()` to its return (every task's
producer has flushed and every record is acknowledged by the ISR). The sink's defaults
apply (acks=all, idempotent, the producer's default batching). CPU is counted for this
process (the driver), the Spark JVM and the servers; the Python workers that encode and
send are short-lived children of the JVM and are not counted.

    python -c "from benchmarks.suite import spark_comparison; spark_comparison()"
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import msgspec

from benchmarks import procstat, stats
from benchmarks.harness import CLIENT, run_async
from benchmarks.workloads import create_topic

#: Spark tasks writing in parallel (`local[TASKS]`; one core each).
TASKS = 2
SPARK_JVM = "spark-jvm"


class SparkSinkSpec(msgspec.Struct, frozen=True, kw_only=True):
    bootstrap: str
    #: Topics `<topic>-0` (warm-up) .. `<topic>-<runs>`, one partition, RF=3.
    topic: str
    record_bytes: int
    rows: int
    runs: int
    replication_factor: int = 3
    pids: dict[str, int] = msgspec.field(default_factory=dict)


def sink_throughput(spec: SparkSinkSpec) -> list[stats.Run]:
    """Warm-up + `runs` timed batch writes of `spec.rows` rows through the Spark sink."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from client.spark import MiniKafkaDataSource

    spark = (
        SparkSession.builder.master(f"local[{TASKS}]")
        .appName("minikafka-bench-sink")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.bind", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )
    try:
        spark.sparkContext.setLogLevel("WARN")
        spark.dataSource.register(MiniKafkaDataSource)
        jvm: Any = spark.sparkContext._jvm
        watched = {
            CLIENT: os.getpid(),
            SPARK_JVM: int(jvm.java.lang.ProcessHandle.current().pid()),
            **spec.pids,
        }
        value = os.urandom(spec.record_bytes)
        df = spark.range(spec.rows, numPartitions=TASKS).select(F.lit(value).alias("value"))
        df = df.cache()
        assert df.count() == spec.rows
        runs: list[stats.Run] = []
        for index in range(spec.runs + 1):
            topic = f"{spec.topic}-{index}"
            run_async(create_topic(spec.bootstrap, topic, spec.replication_factor))
            before = procstat.sample(watched)
            start = time.perf_counter()
            (
                df.write.format("minikafka")
                .option("kafka.bootstrap.servers", spec.bootstrap)
                .option("topic", topic)
                .mode("append")
                .save()
            )
            seconds = time.perf_counter() - start
            cpu = procstat.delta(before, procstat.sample(watched))
            if index:  # run 0 is the warm-up (JIT, Python workers, connections)
                runs.append(
                    stats.Run(
                        records=spec.rows,
                        payload_bytes=spec.rows * spec.record_bytes,
                        seconds=round(seconds, 4),
                        cpu_s={k: round(v, 3) for k, v in cpu.items()},
                    )
                )
        return runs
    finally:
        spark.stop()
