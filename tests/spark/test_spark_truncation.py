"""Epoch-aware offsets (issue 24, Deliver 3): the source notices a log truncated under
it by an unclean election and refilled past the offset it had delivered, which an
offset-only checkpoint (Spark's Kafka source) would read past silently."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from client import Admin, Producer, TopicPartition
from client.spark.offsets import EPOCHS_KEY
from client.spark.progress import source_metrics
from tests.spark.conftest import run_available_now, stream_options
from tests.support.cluster import Cluster, wait_until
from tests.support.wire import fetch

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]


def restart(cluster: Cluster, broker_id: int) -> None:
    process = cluster.brokers[broker_id]
    if process.alive():
        process.kill()
    process.paused = False
    process.start()


def last_checkpointed(checkpoint: Path) -> dict[str, Any]:
    offsets = checkpoint / "offsets"
    newest = max(offsets.iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else -1)
    loaded: dict[str, Any] = json.loads(newest.read_text().splitlines()[-1])
    return loaded


def test_truncation_below_a_delivered_offset_is_detected(
    spark: SparkSession, cluster: Cluster, tmp_path: Path
) -> None:
    topic = "sparktrunc"
    cluster.create_topic(topic, rf=2, min_insync_replicas="1")
    leader, _, isr = cluster.leader_of(topic, 0)
    cluster.wait_isr(topic, 0, isr)
    follower = next(b for b in isr if b != leader)
    with Producer(bootstrap_servers=cluster.bootstrap, acks="all") as producer:
        producer.send_batch(topic, [b"old-%d" % i for i in range(10)]).result(30)
    # The follower stops and leaves the ISR; records 10-29 then exist only on the leader.
    cluster.brokers[follower].pause()
    cluster.wait_isr(topic, 0, [leader], timeout_s=20)
    with Producer(bootstrap_servers=cluster.bootstrap, acks=1, enable_idempotence=False) as fast:
        fast.send_batch(topic, [b"lost-%d" % i for i in range(10, 30)]).result(30)
    wait_until(lambda: fetch(cluster.stub(leader), topic, 0).high_watermark == 30, what="HW at 30")
    strict, lenient = tmp_path / "strict", tmp_path / "lenient"
    options = stream_options(cluster, topic)
    rows = [r for b in run_available_now(spark, options, strict) for r in b]
    assert [r.offset for r in rows] == list(range(30))
    checkpointed = last_checkpointed(strict)
    assert checkpointed[topic] == {"0": 30}
    assert list(checkpointed[EPOCHS_KEY][topic]) == ["0"]  # the epoch of offset 29
    shutil.copytree(strict, lenient)
    legacy = tmp_path / "legacy"  # as the source wrote it before epochs: offsets only
    shutil.copytree(strict, legacy)
    for path in (legacy / "offsets").iterdir():
        if path.name.isdigit():
            lines = path.read_text().splitlines()
            offsets = json.loads(lines[-1])
            offsets.pop(EPOCHS_KEY, None)
            path.write_text("\n".join([*lines[:-1], json.dumps(offsets)]))
    try:
        # The leader dies; the stale follower (log end 10) is elected uncleanly and
        # takes 25 new records: offsets 10-29 now hold other records, and the log ends
        # at 35, past the delivered offset 30.
        cluster.brokers[leader].kill()
        restart(cluster, follower)
        with Admin(cluster.bootstrap) as admin:

            def elected() -> bool:
                admin.elect_leaders("unclean", [TopicPartition(topic, 0)])
                return cluster.leader_of(topic, 0)[0] == follower

            wait_until(elected, timeout_s=30, interval_s=0.2, what="unclean election")
        cluster.wait_leader(topic, not_in=(leader,))
        with Producer(
            bootstrap_servers=cluster.bootstrap, acks=1, enable_idempotence=False
        ) as producer:
            producer.send_batch(topic, [b"new-%d" % i for i in range(10, 35)]).result(30)
        wait_until(
            lambda: fetch(cluster.stub(follower), topic, 0).high_watermark == 35,
            what="HW at 35",
        )

        with pytest.raises(Exception, match=rf"{topic}-0 was truncated") as info:
            run_available_now(spark, options, strict)
        message = str(info.value)
        assert "offsets up to 30 were delivered" in message
        assert "diverges from them at offset 10" in message

        # An offset-only checkpoint still loads, and shows the blind spot of Spark's
        # own Kafka source: it reads on at 30 as if nothing had happened.
        rows = [r for b in run_available_now(spark, options, legacy) for r in b]
        assert [(r.offset, r.value) for r in rows] == [(i, b"new-%d" % i) for i in range(30, 35)]

        lenient_options = {**options, "failOnDataLoss": "false"}
        batches: list[list[Any]] = []
        progress: list[dict[str, Any]] = []

        def collect(df: Any, batch_id: int) -> None:
            batches.append(df.collect())

        query = (
            spark.readStream.format("minikafka")
            .options(**lenient_options)
            .load()
            .writeStream.foreachBatch(collect)
            .option("checkpointLocation", str(lenient))
            .trigger(availableNow=True)
            .start()
        )
        try:
            assert query.awaitTermination(120), "the query did not finish"
            progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
        finally:
            query.stop()
        rows = [r for b in batches for r in b]
        assert [(r.offset, r.value) for r in rows] == [(i, b"new-%d" % i) for i in range(10, 35)]
        assert source_metrics(progress[-1]["sources"][0])["truncatedRecords"] == "20"
    finally:
        restart(cluster, leader)
    cluster.wait_isr(topic, 0, sorted([leader, follower]), timeout_s=60)
