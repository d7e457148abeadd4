"""Replication with real processes: a controller and three brokers on 127.0.0.1.

Checked through the raw wire API: identical replica logs, the high watermark, acks=all
against min.insync.replicas, ISR shrink/expand on lag, fail-over without losing an
acknowledged record, and truncation of a restarted old leader.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from minikafka.errors import ErrorCode
from minikafka.record_batch import build_batch
from minikafka.v1 import broker_pb2
from tests.support.cluster import Cluster, running_cluster, wait_until
from tests.support.wire import fetch, now_ms, produce, read_all

pytestmark = pytest.mark.integration


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with running_cluster(tmp_path, broker_args=["--replica-lag-time-max-ms", "3000"]) as running:
        yield running


def replica_bytes(cluster: Cluster, broker_id: int, topic: str, upto: int) -> bytes:
    """The raw batch bytes of one replica below `upto` (read as a consumer: followers serve
    reads up to their own high watermark, KIP-392)."""
    chunks: list[bytes] = []
    offset = 0
    stub = cluster.stub(broker_id)
    while offset < upto:
        part = fetch(stub, topic, offset)
        assert part.error_code == ErrorCode.NONE, part.error_message
        if not part.records:
            return b"".join(chunks)
        from minikafka.record_batch import iter_batches

        for pos, header in iter_batches(part.records):
            if header.base_offset >= upto:
                break
            chunks.append(part.records[pos : pos + header.size])
            offset = header.next_offset
    return b"".join(chunks)


def high_watermark(cluster: Cluster, broker_id: int, topic: str) -> int:
    return fetch(cluster.stub(broker_id), topic, 0, max_wait_ms=0).high_watermark


def test_followers_hold_identical_logs(cluster: Cluster) -> None:
    cluster.create_topic("rep", rf=3, min_insync_replicas="2")
    leader = cluster.wait_leader("rep")
    for i in range(50):
        batch = build_batch([(now_ms(), b"k%d" % j, b"v-%d-%d" % (i, j), None) for j in range(20)])
        result = produce(cluster.stub(leader), "rep", batch, acks=-1)
        assert result.error_code == ErrorCode.NONE, result.error_message
        assert result.base_offset == i * 20
    end = 50 * 20
    assert high_watermark(cluster, leader, "rep") == end
    wait_until(
        lambda: all(high_watermark(cluster, b, "rep") == end for b in cluster.brokers),
        what="followers' HW to reach the end",
    )
    logs = {b: replica_bytes(cluster, b, "rep", end) for b in cluster.brokers}
    assert len(logs[leader]) > 0
    assert all(data == logs[leader] for data in logs.values())


def test_acks_all_refused_below_min_isr_and_accepted_after_return(cluster: Cluster) -> None:
    cluster.create_topic("minisr", rf=3, min_insync_replicas="2")
    leader = cluster.wait_leader("minisr")
    followers = [b for b in cluster.brokers if b != leader]
    good = produce(cluster.stub(leader), "minisr", build_batch([(now_ms(), None, b"before", None)]))
    assert good.error_code == ErrorCode.NONE
    for broker in followers:
        cluster.brokers[broker].kill()
    cluster.wait_isr("minisr", 0, [leader], timeout_s=30)
    refused = produce(
        cluster.stub(leader), "minisr", build_batch([(now_ms(), None, b"refused", None)])
    )
    assert refused.error_code == ErrorCode.NOT_ENOUGH_REPLICAS
    # acks=1 still appends, but the HW stays frozen below min.insync.replicas.
    hw_before = high_watermark(cluster, leader, "minisr")
    one = produce(
        cluster.stub(leader), "minisr", build_batch([(now_ms(), None, b"acks1", None)]), acks=1
    )
    assert one.error_code == ErrorCode.NONE
    assert high_watermark(cluster, leader, "minisr") == hw_before
    cluster.brokers[followers[0]].start()
    cluster.wait_isr("minisr", 0, sorted([leader, followers[0]]), timeout_s=30)
    accepted = produce(
        cluster.stub(leader), "minisr", build_batch([(now_ms(), None, b"after", None)])
    )
    assert accepted.error_code == ErrorCode.NONE, accepted.error_message
    values = [row[3] for row in read_all(cluster.stub(leader), "minisr")]
    assert values == [b"before", b"acks1", b"after"]


def test_stopped_follower_leaves_isr_and_rejoins(tmp_path: Path) -> None:
    # The controller's session timeout is longer than the lag time, so the leader's
    # lag-based shrink (AlterPartition) is what removes the stopped follower.
    with running_cluster(
        tmp_path,
        broker_args=["--replica-lag-time-max-ms", "1500"],
        controller_args=["--session-timeout-ms", "30000"],
    ) as cluster:
        cluster.create_topic("lag", rf=3, min_insync_replicas="2")
        leader = cluster.wait_leader("lag")
        follower = next(b for b in cluster.brokers if b != leader)
        others = sorted(b for b in cluster.brokers if b != follower)
        cluster.brokers[follower].pause()
        try:
            produce(
                cluster.stub(leader), "lag", build_batch([(now_ms(), None, b"x", None)]), acks=1
            )
            cluster.wait_isr("lag", 0, others, timeout_s=20)
            result = produce(
                cluster.stub(leader), "lag", build_batch([(now_ms(), None, b"y", None)])
            )
            assert result.error_code == ErrorCode.NONE, result.error_message
        finally:
            cluster.brokers[follower].resume()
        cluster.wait_isr("lag", 0, sorted(cluster.brokers), timeout_s=20)


def test_leader_kill_loses_no_acknowledged_record(cluster: Cluster) -> None:
    cluster.create_topic("failover", rf=3, min_insync_replicas="2")
    first_leader = cluster.wait_leader("failover")
    acknowledged: dict[int, bytes] = {}
    stop = threading.Event()
    errors: list[str] = []

    def writer() -> None:
        n = 0
        leader = first_leader
        deadline = time.monotonic() + 60
        while not stop.is_set() and time.monotonic() < deadline and n < 50_000:
            value = b"r%06d" % n
            try:
                result = produce(
                    cluster.stub(leader), "failover", build_batch([(now_ms(), None, value, None)])
                )
            except grpc.RpcError:
                result = None
            if result is not None and result.error_code == ErrorCode.NONE:
                acknowledged[result.base_offset] = value
                n += 1
                continue
            if result is not None:
                errors.append(ErrorCode(result.error_code).name)
            try:
                leader = cluster.wait_leader("failover", not_in=(first_leader,), timeout_s=20)
            except TimeoutError:
                return

    thread = threading.Thread(target=writer)
    thread.start()
    wait_until(lambda: len(acknowledged) >= 200, timeout_s=30, what="200 acknowledged records")
    killed_at = time.monotonic()
    cluster.brokers[first_leader].kill()
    new_leader = cluster.wait_leader("failover", not_in=(first_leader,), timeout_s=20)
    failover_s = time.monotonic() - killed_at
    count_at_failover = len(acknowledged)
    wait_until(
        lambda: len(acknowledged) >= count_at_failover + 200,
        timeout_s=30,
        what="writes after fail-over",
    )
    stop.set()
    thread.join(timeout=60)
    assert failover_s < 10, f"fail-over took {failover_s:.1f}s"
    # The old leader comes back, truncates by epoch, catches up and rejoins the ISR.
    cluster.brokers[first_leader].start()
    cluster.wait_isr("failover", 0, sorted(cluster.brokers), timeout_s=30)
    rows = {
        offset: value for offset, _, _, value, _ in read_all(cluster.stub(new_leader), "failover")
    }
    lost = [offset for offset, value in acknowledged.items() if rows.get(offset) != value]
    assert not lost, f"acknowledged records lost or changed at offsets {lost[:10]}"
    end = max(rows) + 1
    wait_until(
        lambda: all(high_watermark(cluster, b, "failover") == end for b in cluster.brokers),
        what="every replica's HW at the end",
    )
    logs = {b: replica_bytes(cluster, b, "failover", end) for b in cluster.brokers}
    assert all(data == logs[new_leader] for data in logs.values())


def test_fenced_and_not_leader_errors(cluster: Cluster) -> None:
    cluster.create_topic("fence", rf=3)
    leader = cluster.wait_leader("fence")
    _, epoch, _ = cluster.leader_of("fence", 0)
    follower = next(b for b in cluster.brokers if b != leader)
    batch = build_batch([(now_ms(), None, b"v", None)])
    not_leader = produce(cluster.stub(follower), "fence", batch)
    assert not_leader.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER

    def produce_with_epoch(leader_epoch: int) -> int:
        reply = cluster.stub(leader).Produce(
            broker_pb2.ProduceRequest(
                acks=1,
                timeout_ms=5000,
                partitions=[
                    broker_pb2.PartitionProduceData(
                        topic="fence", partition=0, records=batch, current_leader_epoch=leader_epoch
                    )
                ],
            ),
            timeout=10,
        )
        return reply.partitions[0].error_code

    assert produce_with_epoch(epoch + 1) == ErrorCode.UNKNOWN_LEADER_EPOCH
    if epoch > 0:
        assert produce_with_epoch(epoch - 1) == ErrorCode.FENCED_LEADER_EPOCH
    assert produce_with_epoch(epoch) == ErrorCode.NONE
