"""The client against a real cluster: a controller and three brokers (racks a, b, c).

Keyed partitioning, exactly-once delivery of an idempotent acks=all stream across a
leader SIGKILL, truncation detection after an unclean election, seek / position, and
rack-aware follower reads. One cluster serves the module; a test that stops a broker
starts it again and waits for full ISRs before it ends.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from client import Admin, Consumer, ConsumerRecord, FutureRecordMetadata, Producer, TopicPartition
from client.errors import IllegalStateError, LogTruncationError, OffsetOutOfRangeError
from client.partitioner import default_partition
from tests.support.cluster import Cluster, running_cluster, wait_until
from tests.support.wire import fetch

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

RACKS = ["a", "b", "c"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root: Path = tmp_path_factory.mktemp("client-cluster")
    with running_cluster(root, racks=RACKS) as running:
        yield running


def restart(cluster: Cluster, broker_id: int) -> None:
    """Start a stopped broker again (a paused one is killed first)."""
    process = cluster.brokers[broker_id]
    if process.alive():
        process.kill()
    process.paused = False
    process.start()


def wait_full_isr(cluster: Cluster, topic: str, partitions: int = 1) -> None:
    for partition in range(partitions):
        cluster.wait_isr(topic, partition, sorted(cluster.brokers), timeout_s=30)


def high_watermark(cluster: Cluster, broker_id: int, topic: str, partition: int = 0) -> int:
    return fetch(cluster.stub(broker_id), topic, 0, partition=partition).high_watermark


def read_partition(
    cluster: Cluster, tp: TopicPartition, expected: int, **config: object
) -> list[ConsumerRecord]:
    """Every record of `tp` from the beginning, until `expected` arrived (bounded)."""
    records: list[ConsumerRecord] = []
    with Consumer(
        bootstrap_servers=cluster.bootstrap, auto_offset_reset="earliest", **config
    ) as consumer:
        consumer.assign([tp])
        deadline = time.monotonic() + 30
        while len(records) < expected and time.monotonic() < deadline:
            records.extend(consumer.poll(timeout_ms=500, max_records=10_000).get(tp, []))
        # Anything beyond `expected` is a duplicate: give it a moment to show up.
        records.extend(consumer.poll(timeout_ms=300).get(tp, []))
    return records


def poll_until_error(consumer: Consumer, timeout_s: float = 20.0) -> None:
    """Poll until the consumer raises (the caller expects an error); bounded."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        consumer.poll(timeout_ms=200)


def test_keyed_records_land_on_the_murmur2_partition(cluster: Cluster) -> None:
    cluster.create_topic("keyed", partitions=3, rf=3)
    keys = [b"user-%d" % i for i in range(60)]
    with Producer(bootstrap_servers=cluster.bootstrap, acks="all") as producer:
        futures = [producer.send("keyed", b"v-" + key, key=key) for key in keys]
        placed = {key: f.result(timeout=30).partition for key, f in zip(keys, futures, strict=True)}
    # Kafka's default partitioner: toPositive(murmur2(key)) % numPartitions.
    assert placed == {key: default_partition(key, 3) for key in keys}
    assert placed[b"user-0"] == default_partition(b"user-0", 3)
    assert len(set(placed.values())) == 3
    for partition in range(3):
        expected = sorted(k for k, p in placed.items() if p == partition)
        records = read_partition(cluster, TopicPartition("keyed", partition), len(expected))
        assert sorted(r.key for r in records) == expected
        assert all(r.value == b"v-" + r.key for r in records)


def test_seek_and_position(cluster: Cluster) -> None:
    cluster.create_topic("seek", rf=3, min_insync_replicas="2")
    tp = TopicPartition("seek", 0)
    with Producer(bootstrap_servers=cluster.bootstrap, acks="all") as producer:
        for i in range(100):
            producer.send("seek", b"%d" % i)
        producer.flush(30)
    with Consumer(bootstrap_servers=cluster.bootstrap, auto_offset_reset="earliest") as consumer:
        with pytest.raises(IllegalStateError, match="not assigned"):
            consumer.position(tp)
        consumer.assign([tp])
        assert consumer.position(tp) == 0
        got = consumer.poll(timeout_ms=5000, max_records=10)
        assert [r.offset for r in got[tp]] == list(range(10))
        assert consumer.position(tp) == 10  # the offset of the next record poll returns
        assert consumer.highwater(tp) == 100
        consumer.seek(tp, 60)
        assert consumer.position(tp) == 60
        # The position survives a leader change: reading continues at 60 from the new leader.
        leader = cluster.wait_leader("seek")
        assert cluster.brokers[leader].terminate() == 0
        cluster.wait_leader("seek", not_in=(leader,))
        got = consumer.poll(timeout_ms=10_000, max_records=3)
        assert [(r.offset, r.value) for r in got[tp]] == [(60, b"60"), (61, b"61"), (62, b"62")]
        assert consumer.position(tp) == 63
        consumer.seek_to_end(tp)
        assert consumer.position(tp) == 100  # the high watermark
        assert consumer.poll(timeout_ms=200) == {}
        consumer.seek_to_beginning(tp)
        assert consumer.position(tp) == 0
        assert consumer.end_offsets([tp]) == {tp: 100}
        # Beyond the end: OFFSET_OUT_OF_RANGE, then auto_offset_reset applies.
        consumer.seek(tp, 1000)
        assert consumer.position(tp) == 1000
        got = consumer.poll(timeout_ms=10_000, max_records=1)
        assert [r.offset for r in got[tp]] == [0]
    with Consumer(bootstrap_servers=cluster.bootstrap, auto_offset_reset="none") as strict:
        strict.assign([tp])
        strict.seek(tp, 1000)
        with pytest.raises(OffsetOutOfRangeError, match="1000"):
            poll_until_error(strict)
        strict.seek(tp, 99)
        assert [r.value for r in strict.poll(timeout_ms=5000)[tp]] == [b"99"]
    with Consumer(bootstrap_servers=cluster.bootstrap, auto_offset_reset="latest") as latest:
        latest.assign([tp])
        assert latest.position(tp) == 100
    restart(cluster, leader)
    wait_full_isr(cluster, "seek")


def test_client_rack_reads_committed_data_from_a_same_rack_follower(cluster: Cluster) -> None:
    cluster.create_topic("racked", rf=3, min_insync_replicas="2")
    tp = TopicPartition("racked", 0)
    wait_full_isr(cluster, "racked")
    leader = cluster.wait_leader("racked")
    near, far = (b for b in cluster.brokers if b != leader)
    with Producer(bootstrap_servers=cluster.bootstrap, acks="all") as producer:
        for i in range(50):
            producer.send("racked", b"c%d" % i)
        producer.flush(30)
    wait_until(lambda: high_watermark(cluster, near, "racked") == 50, what="follower HW at 50")
    with Consumer(
        bootstrap_servers=cluster.bootstrap,
        auto_offset_reset="none",
        client_rack=RACKS[near - 1],
        fetch_max_wait_ms=100,
    ) as consumer:
        consumer.assign([tp])
        # The far follower stops: it stays in the ISR until the controller fences it, so
        # records written with acks=1 meanwhile are on the leader and the near follower
        # but above the high watermark. The near follower must not serve them.
        cluster.brokers[far].pause()
        try:
            with Producer(
                bootstrap_servers=cluster.bootstrap, acks=1, enable_idempotence=False
            ) as fast:
                for i in range(50, 60):
                    fast.send("racked", b"u%d" % i)
                fast.flush(30)
            consumer.seek(tp, 0)
            seen: list[ConsumerRecord] = []
            deadline = time.monotonic() + 20
            while len(seen) < 60 and time.monotonic() < deadline:
                got = consumer.poll(timeout_ms=200).get(tp, [])
                committed = high_watermark(cluster, leader, "racked")
                assert all(r.offset < committed for r in got), (
                    f"served offsets up to {got[-1].offset} above the HW {committed}"
                )
                seen.extend(got)
        finally:
            cluster.brokers[far].resume()
        assert [r.offset for r in seen] == list(range(60))
        runtime = consumer._inner._runtime
        assert runtime is not None
        node = runtime.fetcher._fetch_node(tp)
        assert node is not None
        assert node.broker_id == near
        # The leader pauses: a same-rack consumer keeps reading from its follower (a
        # fetch sent to the paused leader would hang until the request timeout).
        cluster.brokers[leader].pause()
        try:
            consumer.seek(tp, 0)
            again: list[ConsumerRecord] = []
            deadline = time.monotonic() + 1.2  # before the controller fences the leader
            while len(again) < 60 and time.monotonic() < deadline:
                again.extend(consumer.poll(timeout_ms=200).get(tp, []))
        finally:
            cluster.brokers[leader].resume()
        assert [r.offset for r in again] == list(range(60))
    wait_full_isr(cluster, "racked")


def test_leader_kill_during_idempotent_stream_delivers_every_record_once(
    cluster: Cluster,
) -> None:
    partitions = 3
    cluster.create_topic("stream", partitions=partitions, rf=3, min_insync_replicas="2")
    wait_full_isr(cluster, "stream", partitions)
    victim = cluster.wait_leader("stream", 0)
    total = 6000
    futures: list[tuple[int, int, FutureRecordMetadata]] = []
    sent_per_partition = [0] * partitions
    with Producer(
        bootstrap_servers=cluster.bootstrap,
        acks="all",
        linger_ms=2,
        batch_size=2048,  # ~60 records per batch: several batches in flight per partition
        retry_backoff_ms=50,
    ) as producer:
        for i in range(total):
            partition = i % partitions
            sequence = sent_per_partition[partition]
            sent_per_partition[partition] += 1
            value = b"p%d-%06d" % (partition, sequence)
            futures.append(
                (partition, sequence, producer.send("stream", value, partition=partition))
            )
            if i == total // 3:
                futures[total // 6][2].result(timeout=30)  # some records are acknowledged
                cluster.brokers[victim].kill()
        producer.flush(60)
        acknowledged = [(p, s, f.result(timeout=0)) for p, s, f in futures]
    assert cluster.wait_leader("stream", 0, not_in=(victim,)) != victim
    for partition in range(partitions):
        tp = TopicPartition("stream", partition)
        records = read_partition(cluster, tp, sent_per_partition[partition])
        values = [r.value for r in records]
        expected = [b"p%d-%06d" % (partition, s) for s in range(sent_per_partition[partition])]
        assert values == expected, f"partition {partition}: not exactly once and in order"
        by_offset = {r.offset: r.value for r in records}
        for p, sequence, metadata in acknowledged:
            if p == partition:
                assert by_offset[metadata.offset] == b"p%d-%06d" % (p, sequence)
    restart(cluster, victim)
    wait_full_isr(cluster, "stream", partitions)


def test_a_paused_leader_is_left_long_before_the_request_timeout(cluster: Cluster) -> None:
    """SIGSTOP the leader: the producer's in-flight request and the consumer's fetch
    never get an answer (nor a reset), yet both move to the new leader once metadata
    shows it, instead of waiting out the 30 s request timeout."""
    cluster.create_topic("paused", rf=3, min_insync_replicas="2")
    wait_full_isr(cluster, "paused")
    victim = cluster.wait_leader("paused", 0)
    tp = TopicPartition("paused", 0)
    request_timeout_s = 30
    with (
        Producer(
            bootstrap_servers=cluster.bootstrap,
            acks="all",
            linger_ms=0,
            request_timeout_ms=request_timeout_s * 1000,
        ) as producer,
        Consumer(
            bootstrap_servers=cluster.bootstrap,
            auto_offset_reset="earliest",
            request_timeout_ms=request_timeout_s * 1000,
        ) as consumer,
    ):
        consumer.assign([tp])
        producer.send("paused", b"before").result(timeout=30)
        assert [r.value for r in consumer.poll(timeout_ms=10_000)[tp]] == [b"before"]
        consumer.poll(timeout_ms=100)  # the next fetch is now long-polling on the leader
        cluster.brokers[victim].pause()
        started = time.monotonic()
        metadata = producer.send("paused", b"after").result(timeout=request_timeout_s)
        produce_s = time.monotonic() - started
        got: list[bytes] = []
        while not got and time.monotonic() - started < request_timeout_s:
            got = [r.value for r in consumer.poll(timeout_ms=500).get(tp, [])]
        consume_s = time.monotonic() - started
    assert metadata.offset == 1
    assert got == [b"after"]
    # The session timeout is 1.5 s; the request timeout 30 s. Both moved in seconds.
    assert produce_s < request_timeout_s / 3, f"produce took {produce_s:.1f} s"
    assert consume_s < request_timeout_s / 3, f"consume took {consume_s:.1f} s"
    assert cluster.wait_leader("paused", 0, not_in=(victim,)) != victim
    restart(cluster, victim)
    wait_full_isr(cluster, "paused")


def test_truncation_under_a_consumer_is_detected(cluster: Cluster) -> None:
    cluster.create_topic("trunc", rf=2, min_insync_replicas="1")
    tp = TopicPartition("trunc", 0)
    leader, _, isr = cluster.leader_of("trunc", 0)
    cluster.wait_isr("trunc", 0, isr)
    follower = next(b for b in isr if b != leader)
    assert cluster.wait_leader("trunc") == leader
    with Producer(bootstrap_servers=cluster.bootstrap, acks="all") as producer:
        for i in range(10):
            producer.send("trunc", b"old-%d" % i)
        producer.flush(30)
    # The follower stops and leaves the ISR; acks=1 records 10-29 exist only on the leader.
    cluster.brokers[follower].pause()
    cluster.wait_isr("trunc", 0, [leader], timeout_s=20)
    with Producer(bootstrap_servers=cluster.bootstrap, acks=1, enable_idempotence=False) as fast:
        for i in range(10, 30):
            fast.send("trunc", b"lost-%d" % i)
        fast.flush(30)
    wait_until(lambda: high_watermark(cluster, leader, "trunc") == 30, what="HW at 30")
    strict = Consumer(bootstrap_servers=cluster.bootstrap, auto_offset_reset="earliest")
    lenient = Consumer(
        bootstrap_servers=cluster.bootstrap, auto_offset_reset="earliest", reset_on_truncation=True
    )
    try:
        for consumer in (strict, lenient):
            consumer.assign([tp])
            seen: list[ConsumerRecord] = []
            deadline = time.monotonic() + 20
            while len(seen) < 30 and time.monotonic() < deadline:
                seen.extend(consumer.poll(timeout_ms=500).get(tp, []))
            assert [r.offset for r in seen] == list(range(30))
            assert consumer.position(tp) == 30
        # The leader dies; the stale follower comes back and is elected uncleanly: its
        # log ends at 10, so offsets 10-29 the consumers read are gone.
        cluster.brokers[leader].kill()
        restart(cluster, follower)
        with Admin(cluster.bootstrap) as admin:

            def elected() -> bool:
                admin.elect_leaders("unclean", [tp])
                return cluster.leader_of("trunc", 0)[0] == follower

            wait_until(elected, timeout_s=30, interval_s=0.2, what="unclean election")
        assert cluster.wait_leader("trunc", not_in=(leader,)) == follower
        with Producer(
            bootstrap_servers=cluster.bootstrap, acks=1, enable_idempotence=False
        ) as producer:
            for i in range(10, 15):
                producer.send("trunc", b"new-%d" % i)
            producer.flush(30)
        with pytest.raises(LogTruncationError) as info:
            poll_until_error(strict)
        assert (info.value.tp, info.value.offset, info.value.divergent_offset) == (tp, 30, 10)
        # The error stays until the user repositions the consumer.
        with pytest.raises(LogTruncationError):
            strict.poll(timeout_ms=10)
        strict.seek(tp, info.value.divergent_offset)
        resumed = strict.poll(timeout_ms=10_000).get(tp, [])
        assert [r.value for r in resumed] == [b"new-%d" % i for i in range(10, 15)]
        # With reset_on_truncation the consumer resumes at the divergence point itself.
        records: list[ConsumerRecord] = []
        deadline = time.monotonic() + 20
        while len(records) < 5 and time.monotonic() < deadline:
            records.extend(lenient.poll(timeout_ms=500).get(tp, []))
        assert [(r.offset, r.value) for r in records] == [(i, b"new-%d" % i) for i in range(10, 15)]
        assert lenient.position(tp) == 15
    finally:
        strict.close()
        lenient.close()
        restart(cluster, leader)
    cluster.wait_isr("trunc", 0, sorted([leader, follower]), timeout_s=30)
