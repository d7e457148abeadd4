"""Fixtures for the Spark source tests: one real cluster and one SparkSession per session.

Both are expensive (a JVM start alone takes seconds on two cores), so they are shared;
each test uses its own topics and checkpoint directories.

The session's master is `local[2]` (tasks in the driver's JVM), or MINIKAFKA_SPARK_MASTER, e.g.
`local-cluster[2,1,1024]`: Spark's own test cluster, a standalone master and two workers whose
executors are JVMs of their own, so every task runs outside the driver process and the source
and sink only have what their pickled partitions carry (test_spark_cluster.py runs a selection
of these tests that way). A `local-cluster` master needs SPARK_HOME to be the pyspark package
directory (its `bin/` and `jars/` start the executors); the fixture sets that, and removes
the application's directory that the workers create under `SPARK_HOME/work/` (executor logs,
the fixture prints where while the session runs). Starting the executor JVMs takes tens of
seconds on a loaded two-core machine.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from minikafka.errors import ErrorCode
from minikafka.record_batch import build_batch
from tests.support.cluster import Cluster, running_cluster, wait_until
from tests.support.wire import produce

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

MISSING_SPARK = (
    "pyspark is not installed (pip install -e '.[spark]')"
    if importlib.util.find_spec("pyspark") is None
    else "Java is not installed (pyspark needs a JVM: set JAVA_HOME or put java on PATH)"
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME")
    else None
)

#: The master of the shared SparkSession (see the module docstring).
SPARK_MASTER = os.environ.get("MINIKAFKA_SPARK_MASTER", "local[2]")


def on_cluster() -> bool:
    """Whether the tasks run in executor JVMs of their own (a local-cluster master)."""
    return SPARK_MASTER.startswith("local-cluster")


def task_jvm_pids(spark: SparkSession, tasks: int = 4) -> set[int]:
    """The pids of the JVMs that ran `tasks` Python tasks: a Python worker is forked by
    pyspark's daemon, whose parent is the JVM (the driver's, or an executor's)."""

    def jvm_pid(_: object) -> int:
        import os as os_  # resolved in the worker, not pickled with the test module

        with open(f"/proc/{os_.getppid()}/stat") as stat:
            return int(stat.read().rsplit(")", 1)[1].split()[1])

    rdd = spark.sparkContext.parallelize(range(tasks), tasks)
    return set(rdd.map(jvm_pid).collect())


def driver_jvm_pid(spark: SparkSession) -> int:
    jvm: Any = spark.sparkContext._jvm
    return int(jvm.java.lang.ProcessHandle.current().pid())


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("spark-cluster")) as started:
        yield started


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    if MISSING_SPARK is not None:
        pytest.skip(MISSING_SPARK)
    if on_cluster():
        import pyspark

        os.environ["SPARK_HOME"] = str(Path(pyspark.__file__).parent)
    # Workers must run this interpreter (the venv has pyarrow); otherwise they fail with
    # "Python worker failed to connect back".
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from client.spark import MiniKafkaDataSource

    session = (
        SparkSession.builder.master(SPARK_MASTER)
        .appName("minikafka-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.driver.bind", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("WARN")
    session.dataSource.register(MiniKafkaDataSource)
    work = Path(
        os.environ.get("SPARK_HOME", "/nonexistent"), "work", session.sparkContext.applicationId
    )
    if on_cluster():
        print(f"executor logs: {work}")
    try:
        yield session
    finally:
        session.stop()
        if on_cluster():
            shutil.rmtree(work, ignore_errors=True)


def bootstrap(cluster: Cluster) -> str:
    """Every broker address, so the source survives the loss of any one broker."""
    return ",".join(p.address for p in cluster.brokers.values())


def produce_values(
    cluster: Cluster,
    topic: str,
    values: Sequence[bytes],
    *,
    partition: int = 0,
    acks: int = -1,
    key: bytes | None = None,
    headers: list[tuple[str, bytes]] | None = None,
    timestamp_ms: int | None = None,
) -> int:
    """Produce `values` as one batch to the current leader (retrying a leader move);
    returns the base offset."""
    ts = timestamp_ms if timestamp_ms is not None else int(time.time() * 1000)
    batch = build_batch([(ts + i, key, v, headers) for i, v in enumerate(values)])

    def attempt() -> int | None:
        leader = cluster.wait_leader(topic, partition)
        result = produce(cluster.stub(leader), topic, batch, acks=acks, partition=partition)
        if result.error_code == ErrorCode.NONE:
            return result.base_offset + 1  # +1 keeps offset 0 truthy for wait_until
        assert result.error_code in (
            ErrorCode.NOT_LEADER_OR_FOLLOWER,
            ErrorCode.NOT_ENOUGH_REPLICAS,
            ErrorCode.LEADER_NOT_AVAILABLE,
        ), result.error_message
        return None

    return wait_until(attempt, timeout_s=30, what=f"produce to {topic}-{partition}") - 1


def stream_options(cluster: Cluster, topic: str, **extra: str) -> dict[str, Any]:
    return {
        "kafka.bootstrap.servers": bootstrap(cluster),
        "subscribe": topic,
        "startingOffsets": "earliest",
        **extra,
    }


def run_available_now(
    spark: SparkSession,
    options: dict[str, Any],
    checkpoint: Path,
    *,
    timeout_s: int = 120,
) -> list[list[Any]]:
    """Run one Trigger.AvailableNow query to completion; returns the rows of each
    non-empty micro-batch."""
    batches: list[list[Any]] = []

    def collect(df: Any, batch_id: int) -> None:
        rows = df.collect()
        if rows:
            batches.append(rows)

    query = (
        spark.readStream.format("minikafka")
        .options(**options)
        .load()
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        finished = query.awaitTermination(timeout_s)
        assert finished, f"AvailableNow query did not finish within {timeout_s}s"
    finally:
        query.stop()
    return batches
