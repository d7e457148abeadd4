"""The compose `spark` profile for real: a Spark standalone master and two workers (started
with pyspark's `spark-class` launcher) and the example topic-to-topic job submitted to
`spark://spark-master:7077`. Records produced from the host to `events` come back as counts
per key in `event-counts`, computed by executors on the workers.

Slow (the spark image, 2 GB, holds a JRE from the Debian mirror and pyspark; four JVMs
start: about 3.5 minutes with cached images on two cores), so it is one test and runs only
with MINIKAFKA_COMPOSE_SPARK=1 (as the monitoring profile's test). Skips (with the reason)
otherwise and where there is no Docker engine or Compose tool; everything it creates is
removed in `finally`; the images stay as build caches.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from client import Consumer, Producer, TopicPartition
from tests.docker.compose import (
    CLUSTER_SERVICES,
    CommandError,
    ComposeProject,
    base_image,
    compose_command,
    docker_unavailable_reason,
    run,
)
from tests.support.cluster import wait_until
from tests.support.processes import free_port

pytestmark = [pytest.mark.docker, pytest.mark.timeout(1500)]

BASE_IMAGE_TIMEOUT_S = 300.0
BUILD_TIMEOUT_S = 900.0
START_TIMEOUT_S = 180.0
RESULT_TIMEOUT_S = 300.0
APP_NAME = "minikafka-topic-pipeline"
SPARK_ENV = "MINIKAFKA_COMPOSE_SPARK"
# Run inside the master's container: its status as JSON (the standalone master's UI).
_MASTER_STATUS = (
    "import urllib.request as u; "
    "print(u.urlopen('http://127.0.0.1:8080/json/', timeout=5).read().decode())"
)


@pytest.fixture(scope="module")
def project() -> Iterator[ComposeProject]:
    reason = docker_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    if os.environ.get(SPARK_ENV) != "1":
        pytest.skip(f"the spark profile is not part of this run ({SPARK_ENV}=1)")
    command = compose_command()
    assert command is not None
    ports = {broker_id: free_port() for broker_id in (1, 2, 3)}
    compose = ComposeProject(command, f"mkspark{uuid.uuid4().hex[:10]}", ports, profiles=["spark"])
    python_image = base_image(BASE_IMAGE_TIMEOUT_S)
    compose.build(python_image, BUILD_TIMEOUT_S)
    try:
        with compose.logs_on_failure():
            compose.up(START_TIMEOUT_S)
            compose.wait_healthy([*CLUSTER_SERVICES, "spark-master"], START_TIMEOUT_S)
        yield compose
    finally:
        compose.down()


def master_status(project: ComposeProject) -> dict[str, Any]:
    out = run(
        ["docker", "exec", project.container("spark-master"), "python3", "-c", _MASTER_STATUS],
        timeout_s=30,
    )
    status: dict[str, Any] = json.loads(out)
    return status


def running_app(project: ComposeProject) -> dict[str, Any] | None:
    """The example job as the master lists it once it runs with two executors' cores."""
    try:
        status = master_status(project)
    except (CommandError, ValueError):
        return None
    alive = [w for w in status.get("workers", []) if w.get("state") == "ALIVE"]
    apps = [a for a in status.get("activeapps", []) if a.get("name") == APP_NAME]
    if len(alive) == 2 and apps and apps[0].get("state") == "RUNNING" and apps[0]["cores"] == 2:
        app: dict[str, Any] = apps[0]
        return app
    return None


def latest_counts(bootstrap: str, deadline: float) -> dict[bytes, bytes]:
    """The newest value per key in `event-counts` (read from the start, bounded)."""
    partitions = [TopicPartition("event-counts", p) for p in range(3)]
    latest: dict[bytes, tuple[int, int, bytes]] = {}
    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        idle = 0
        while idle < 3 and time.monotonic() < deadline:
            batch = consumer.poll(timeout_ms=1000)
            idle = 0 if batch else idle + 1
            for records in batch.values():
                for r in records:
                    if r.key is not None and r.value is not None:
                        latest[r.key] = (r.partition, r.offset, r.value)
    return {key: value for key, (_, _, value) in latest.items()}


def test_example_job_runs_on_the_standalone_cluster(project: ComposeProject) -> None:
    bootstrap = ",".join(f"127.0.0.1:{port}" for port in project.broker_ports.values())
    with project.logs_on_failure():
        app = wait_until(
            lambda: running_app(project),
            timeout_s=START_TIMEOUT_S,
            interval_s=2.0,
            what="the example job running on two workers",
        )
        assert app["state"] == "RUNNING"
        with Producer(bootstrap_servers=bootstrap, acks="all") as producer:
            for key, count in ((b"alice", 3), (b"bob", 2)):
                for n in range(count):
                    producer.send("events", b"click-%d" % n, key=key).result(timeout=60)
        expected = {b"alice": b"3", b"bob": b"2"}
        deadline = time.monotonic() + RESULT_TIMEOUT_S

        def counted() -> bool:
            return latest_counts(bootstrap, deadline) == expected

        wait_until(counted, timeout_s=RESULT_TIMEOUT_S, interval_s=3.0, what="counts per key")
        assert project.state("spark-job")["Running"] is True
