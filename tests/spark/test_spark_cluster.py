"""The Spark source and sink with executors in processes other than the driver (issue 24,
Deliver 6): Spark's `local-cluster[2,1,1024]` master (a standalone master and two workers in
the driver's JVM, each worker launching an executor JVM with `bin/spark-class` from the pyspark
package) runs the batch write-then-read round trip and the streaming topic-to-topic query with
a broker killed mid-run (tests/spark/test_spark_sink.py), plus the check that tasks really ran
outside the driver's JVM. They run in a child pytest with MINIKAFKA_SPARK_MASTER set, because a
Python process holds one SparkContext and the other tests share a `local[2]` one.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.spark.conftest import MISSING_SPARK, driver_jvm_pid, on_cluster, task_jvm_pids

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark]

REPO = Path(__file__).resolve().parents[2]
CLUSTER_MASTER = "local-cluster[2,1,1024]"
#: The tests the child runs on the cluster master.
CLUSTER_TESTS = (
    "tests/spark/test_spark_cluster.py::test_tasks_run_in_the_jvms_the_master_says",
    "tests/spark/test_spark_sink.py::test_batch_write_then_read_returns_the_same_rows",
    "tests/spark/test_spark_sink.py::test_streaming_topic_to_topic_survives_a_broker_kill",
)
CHILD_TIMEOUT_S = 900


@pytest.mark.timeout(300)
def test_tasks_run_in_the_jvms_the_master_says(spark: SparkSession) -> None:
    driver = driver_jvm_pid(spark)
    pids = task_jvm_pids(spark)
    if on_cluster():
        assert pids, "no task ran"
        assert driver not in pids, f"a task ran in the driver's JVM {driver}: {pids}"
    else:
        assert pids == {driver}


@pytest.mark.timeout(CHILD_TIMEOUT_S + 60)
def test_source_and_sink_on_a_local_cluster() -> None:
    if on_cluster():
        pytest.skip("this is the child run (already on the cluster master)")
    if MISSING_SPARK is not None:
        pytest.skip(MISSING_SPARK)
    env = dict(os.environ, MINIKAFKA_SPARK_MASTER=CLUSTER_MASTER)
    child = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", *CLUSTER_TESTS],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_S,
        check=False,
    )
    output = child.stdout + child.stderr
    assert child.returncode == 0, output[-6000:]
    assert re.search(rf"\b{len(CLUSTER_TESTS)} passed\b", output), output[-3000:]
    for line in re.findall(r"streaming sink across a broker kill[^\n]*", output):
        print(f"{CLUSTER_MASTER}: {line}")  # the streaming test's duplicate count
