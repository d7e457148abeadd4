"""Spark sink throughput: rows/s that `df.write.format("minikafka")` puts into an RF=3
acks=all topic, measured next to the producer's own bulk path (`Producer.send_batch`) and
`send()` on the same cluster, in the same run.

Runs in a spawned worker (`benchmarks.harness.in_worker`): a `local[tasks]` SparkSession, a
cached DataFrame of `rows` values of `record_bytes` (built before the clock starts; a million
rows in the suite, so that the fixed cost of a Spark write job, about 0.7 s on the 2-core
box, does not dominate), then a warm-up and `runs` timed batch writes of the whole DataFrame
into a fresh one-partition topic (the producer cases' layout), each timed from `save()` to
its return (every task's producer has flushed and every record is acknowledged by the ISR).
The sink's defaults apply (acks=all, idempotent, the producer's default batching). The
client's CPU is this process (the driver) plus the Spark JVM and every process under it
(pyspark's daemon and the reused Python workers that encode and send), sampled before and
after each run.

    python -c "from benchmarks.suite import spark_comparison; spark_comparison()"
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import msgspec

from benchmarks import procstat, stats
from benchmarks.harness import CLIENT, run_async
from benchmarks.workloads import create_topic

#: Spark tasks writing in parallel (`local[TASKS]`; one core each).
TASKS = 2


def _descendants(root: int) -> list[int]:
    """`root` and every process below it (from /proc's parent pids)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # exited meanwhile
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
    found: list[int] = []
    todo = [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def _client_cpu_s(driver: int, jvm: int) -> float:
    """CPU seconds of the driver, the JVM and the JVM's process tree (Python workers)."""
    return sum(procstat.cpu_seconds(pid) for pid in {driver, *_descendants(jvm)})  # 0: gone


class SparkSinkSpec(msgspec.Struct, frozen=True, kw_only=True):
    bootstrap: str
    #: Topics `<topic>-0` (warm-up) .. `<topic>-<runs>`, one partition, RF=3.
    topic: str
    record_bytes: int
    rows: int
    runs: int
    replication_factor: int = 3
    #: Spark tasks writing in parallel: `local[tasks]`, the DataFrame in `tasks` partitions.
    tasks: int = TASKS
    pids: dict[str, int] = msgspec.field(default_factory=dict)


def sink_throughput(spec: SparkSinkSpec) -> list[stats.Run]:
    """Warm-up + `runs` timed batch writes of `spec.rows` rows through the Spark sink."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from client.spark import MiniKafkaDataSource

    spark = (
        SparkSession.builder.master(f"local[{spec.tasks}]")
        .appName("minikafka-bench-sink")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.bind", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )
    try:
        spark.sparkContext.setLogLevel("WARN")
        spark.dataSource.register(MiniKafkaDataSource)
        gateway: Any = spark.sparkContext._jvm
        jvm = int(gateway.java.lang.ProcessHandle.current().pid())
        value = os.urandom(spec.record_bytes)
        df = spark.range(spec.rows, numPartitions=spec.tasks).select(F.lit(value).alias("value"))
        df = df.cache()
        assert df.count() == spec.rows
        runs: list[stats.Run] = []
        for index in range(spec.runs + 1):
            topic = f"{spec.topic}-{index}"
            run_async(create_topic(spec.bootstrap, topic, spec.replication_factor))
            before = procstat.sample(spec.pids)
            client_before = _client_cpu_s(os.getpid(), jvm)
            start = time.perf_counter()
            (
                df.write.format("minikafka")
                .option("kafka.bootstrap.servers", spec.bootstrap)
                .option("topic", topic)
                .mode("append")
                .save()
            )
            seconds = time.perf_counter() - start
            cpu = procstat.delta(before, procstat.sample(spec.pids))
            cpu[CLIENT] = _client_cpu_s(os.getpid(), jvm) - client_before
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
