"""A real `minikafka broker --standalone` process over gRPC: produce, fetch, offsets, validation,
crash recovery. Uses the raw wire API so that the broker is tested independently of the client."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from minikafka.errors import ErrorCode
from minikafka.record_batch import build_batch
from minikafka.v1 import broker_pb2, broker_pb2_grpc
from tests.integration.conftest import StandaloneBroker
from tests.support.processes import standalone_broker_process
from tests.support.wire import create_topic, fetch, now_ms, produce, read_all

pytestmark = pytest.mark.integration


@pytest.fixture
def stub(standalone_broker: StandaloneBroker) -> Iterator[broker_pb2_grpc.BrokerServiceStub]:
    with grpc.insecure_channel(standalone_broker.bootstrap) as channel:
        yield broker_pb2_grpc.BrokerServiceStub(channel)


@pytest.mark.parametrize("acks", [0, 1, -1], ids=["acks0", "acks1", "acks-all"])
def test_round_trip_keyed_unkeyed_headers(
    stub: broker_pb2_grpc.BrokerServiceStub, acks: int
) -> None:
    assert create_topic(stub, "orders").error_code == ErrorCode.NONE
    sent: list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes]] | None]] = []
    for batch_no in range(5):
        records = [
            (
                1_700_000_000_000 + batch_no * 10 + i,
                (b"key-%d" % i) if i % 2 else None,
                b"value-%d-%d" % (batch_no, i),
                [("h", b"x%d" % i)] if i % 3 == 0 else None,
            )
            for i in range(7)
        ]
        result = produce(stub, "orders", build_batch(records), acks=acks)
        assert result.error_code == ErrorCode.NONE, result.error_message
        if acks != 0:
            assert result.base_offset == batch_no * 7
        sent.extend(records)
    got = read_all(stub, "orders")
    assert [r[0] for r in got] == list(range(len(sent)))
    assert [(ts, k, v, h) for _, ts, k, v, h in got] == [
        (ts, k, v, list(h) if h else None) for ts, k, v, h in sent
    ]


def test_validation_errors_append_nothing(stub: broker_pb2_grpc.BrokerServiceStub) -> None:
    assert create_topic(stub, "t", max_message_bytes="2000").error_code == ErrorCode.NONE
    good = build_batch([(now_ms(), None, b"ok", None)])
    corrupt = bytearray(good)
    corrupt[-1] ^= 0xFF
    assert produce(stub, "t", bytes(corrupt)).error_code == ErrorCode.CORRUPT_MESSAGE
    assert produce(stub, "t", good + bytes(corrupt)).error_code == ErrorCode.CORRUPT_MESSAGE
    assert produce(stub, "t", b"").error_code in (
        ErrorCode.INVALID_RECORD,
        ErrorCode.CORRUPT_MESSAGE,
    )
    assert produce(stub, "t", good[:30]).error_code == ErrorCode.CORRUPT_MESSAGE
    big = build_batch([(now_ms(), None, b"x" * 5000, None)])
    assert produce(stub, "t", big).error_code == ErrorCode.MESSAGE_TOO_LARGE
    assert produce(stub, "t", good, acks=2).error_code == ErrorCode.INVALID_REQUIRED_ACKS
    assert produce(stub, "nope", good).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert produce(stub, "t", good, partition=3).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert read_all(stub, "t") == []
    assert produce(stub, "t", good).base_offset == 0  # the log is untouched
    assert fetch(stub, "t", 5).error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    with pytest.raises(grpc.RpcError) as info:
        stub.Fetch(
            broker_pb2.FetchRequest(
                max_wait_ms=-5, partitions=[broker_pb2.FetchPartition(topic="t")]
            ),
            timeout=5,
        )
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_topic_admin_errors(stub: broker_pb2_grpc.BrokerServiceStub) -> None:
    assert create_topic(stub, "a").error_code == ErrorCode.NONE
    assert create_topic(stub, "a").error_code == ErrorCode.TOPIC_ALREADY_EXISTS
    assert create_topic(stub, "bad/name").error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert create_topic(stub, "a.b_c").error_code == ErrorCode.NONE
    collides = create_topic(stub, "a_b.c")
    assert collides.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert "collides with existing topic 'a.b_c'" in collides.error_message
    assert create_topic(stub, "b", partitions=0).error_code == ErrorCode.INVALID_PARTITIONS
    bad_config = create_topic(stub, "c", no_such_key="1")
    assert bad_config.error_code == ErrorCode.INVALID_CONFIG
    assert "no.such.key" in bad_config.error_message
    too_high = create_topic(stub, "d", min_insync_replicas="2")
    assert too_high.error_code == ErrorCode.INVALID_CONFIG
    assert "replication factor" in too_high.error_message


def test_long_poll_wakes_on_append(stub: broker_pb2_grpc.BrokerServiceStub) -> None:
    create_topic(stub, "lp")
    result: dict[str, broker_pb2.FetchPartitionResponse] = {}

    def waiter() -> None:
        result["r"] = fetch(stub, "lp", 0, max_wait_ms=20_000)

    thread = threading.Thread(target=waiter)
    started = time.monotonic()
    thread.start()
    produce(stub, "lp", build_batch([(now_ms(), None, b"wake", None)]))
    thread.join(timeout=30)
    assert not thread.is_alive()
    assert time.monotonic() - started < 15  # woke on the append, not at the 20 s deadline
    assert result["r"].records
    assert result["r"].high_watermark == 1


def test_list_offsets_and_metadata(stub: broker_pb2_grpc.BrokerServiceStub) -> None:
    create_topic(stub, "lo", partitions=2, retention_ms="-1")  # synthetic 1970 timestamps
    for ts in (1000, 2000, 3000):
        produce(stub, "lo", build_batch([(ts, None, b"v", None)]))

    def list_offset(timestamp: int) -> broker_pb2.ListOffsetsPartitionResponse:
        reply = stub.ListOffsets(
            broker_pb2.ListOffsetsRequest(
                partitions=[
                    broker_pb2.ListOffsetsPartition(
                        topic="lo", partition=0, timestamp_ms=timestamp, current_leader_epoch=-1
                    )
                ]
            ),
            timeout=5,
        )
        return reply.partitions[0]

    assert list_offset(-2).offset == 0
    assert list_offset(-1).offset == 3
    assert list_offset(1500).offset == 1
    assert list_offset(9999).offset == -1
    meta = stub.Metadata(broker_pb2.MetadataRequest(topics=[]), timeout=5)
    assert [t.name for t in meta.topics] == ["lo"]
    assert [p.partition for p in meta.topics[0].partitions] == [0, 1]
    assert meta.topics[0].partitions[0].leader == meta.brokers[0].broker_id
    missing = stub.Metadata(broker_pb2.MetadataRequest(topics=["ghost"]), timeout=5)
    assert missing.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_kill9_during_produce_keeps_acknowledged_records(tmp_path: Path) -> None:
    data_dir = tmp_path / "broker-1"
    process = standalone_broker_process(
        data_dir,
        extra=["--min-segment-bytes", "1024"],  # small segments roll often
    ).start()
    acknowledged: list[tuple[int, bytes]] = []
    try:
        with grpc.insecure_channel(process.address) as channel:
            stub = broker_pb2_grpc.BrokerServiceStub(channel)
            create_topic(stub, "crash", segment_bytes="65536")
            stop = threading.Event()

            def writer() -> None:
                n = 0
                while not stop.is_set() and n < 100_000:
                    value = b"v%08d" % n + b"x" * 200
                    try:
                        result = produce(
                            stub, "crash", build_batch([(now_ms(), None, value, None)]), acks=1
                        )
                    except grpc.RpcError:
                        return
                    if result.error_code == ErrorCode.NONE:
                        acknowledged.append((result.base_offset, value))
                    n += 1

            thread = threading.Thread(target=writer)
            thread.start()
            deadline = time.monotonic() + 20
            while len(acknowledged) < 300 and time.monotonic() < deadline:
                thread.join(timeout=0.05)
            process.kill()
            stop.set()
            thread.join(timeout=30)
        assert len(acknowledged) >= 300
        dump = subprocess.run(
            [sys.executable, "-m", "minikafka", "log", "dump", str(data_dir / "crash-0")],
            capture_output=True,
            text=True,
            timeout=60,
        )
        process.start()
        with grpc.insecure_channel(process.address) as channel:
            stub = broker_pb2_grpc.BrokerServiceStub(channel)
            got = {offset: value for offset, _, _, value, _ in read_all(stub, "crash")}
            for offset, value in acknowledged:
                assert got.get(offset) == value, f"acknowledged offset {offset} lost"
            end = max(got) + 1
            nxt = produce(stub, "crash", build_batch([(now_ms(), None, b"after", None)]), acks=1)
            assert nxt.base_offset == end
        # The tail that was cut by the kill (if any) was reported by log dump before recovery;
        # after recovery every batch must be valid.
        assert dump.returncode in (0, 1), dump.stderr
        after = subprocess.run(
            [sys.executable, "-m", "minikafka", "log", "dump", str(data_dir / "crash-0")],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert after.returncode == 0, after.stdout[-2000:] + after.stderr
    finally:
        if process.alive():
            process.terminate()


def test_sigterm_writes_clean_shutdown_marker(tmp_path: Path) -> None:
    data_dir = tmp_path / "broker-1"
    process = standalone_broker_process(data_dir).start()
    with grpc.insecure_channel(process.address) as channel:
        stub = broker_pb2_grpc.BrokerServiceStub(channel)
        create_topic(stub, "clean")
        produce(stub, "clean", build_batch([(now_ms(), None, b"v", None)]))
    assert process.terminate() == 0
    assert (data_dir / "clean-shutdown").exists()
    process.start()
    assert not (data_dir / "clean-shutdown").exists()  # removed while running
    with grpc.insecure_channel(process.address) as channel:
        stub = broker_pb2_grpc.BrokerServiceStub(channel)
        assert [r[3] for r in read_all(stub, "clean")] == [b"v"]
    process.terminate()


def test_second_broker_on_same_data_dir_is_refused(
    standalone_broker: StandaloneBroker, tmp_path: Path
) -> None:
    other = standalone_broker_process(standalone_broker.data_dir, broker_id=2)
    other.start(wait=False)
    assert other.proc is not None
    assert other.proc.wait(timeout=30) != 0
    assert "lock" in other.log_text().lower()


def test_metrics_endpoint(tmp_path: Path) -> None:
    import urllib.request

    from tests.support.processes import free_port

    metrics_port = free_port()
    process = standalone_broker_process(
        tmp_path / "broker-1", extra=["--metrics-listen", f"127.0.0.1:{metrics_port}"]
    ).start()
    try:
        with grpc.insecure_channel(process.address) as channel:
            stub = broker_pb2_grpc.BrokerServiceStub(channel)
            create_topic(stub, "m")
            produce(stub, "m", build_batch([(now_ms(), None, b"v", None)] * 3))
            fetch(stub, "m", 0)
        with urllib.request.urlopen(
            f"http://127.0.0.1:{metrics_port}/metrics", timeout=10
        ) as reply:
            text = reply.read().decode()
        assert 'minikafka_partition_high_watermark{partition="0",topic="m"} 3.0' in text
        assert "minikafka_under_replicated_partitions 0.0" in text
        assert 'minikafka_produce_partition_requests_total{error="NONE"} 1.0' in text
        assert 'minikafka_fetch_requests_total{kind="consumer"} 1.0' in text
        assert "minikafka_produce_latency_seconds_count 1.0" in text
    finally:
        process.terminate()


def idempotent_batch(sequence: int) -> bytes:
    return build_batch(
        [(now_ms(), None, b"seq-%04d" % sequence + b"." * 300, None)],
        producer_id=7,
        producer_epoch=0,
        base_sequence=sequence,
    )


def test_producer_state_is_rebuilt_from_snapshots_after_restarts(tmp_path: Path) -> None:
    """Segment rolls and clean shutdowns snapshot the idempotent-producer table; after a
    clean restart, a crash, and with the newest snapshot damaged, the broker still
    recognises a resent batch as a duplicate and still enforces the next sequence."""
    data_dir = tmp_path / "broker-1"
    process = standalone_broker_process(
        data_dir,
        extra=["--min-segment-bytes", "1024"],  # small segments roll often
    ).start()
    topic_dir = data_dir / "idem-0"

    def check(next_sequence: int) -> None:
        with grpc.insecure_channel(process.address) as channel:
            stub = broker_pb2_grpc.BrokerServiceStub(channel)
            again = produce(stub, "idem", idempotent_batch(next_sequence - 1))
            assert again.error_code == ErrorCode.DUPLICATE_SEQUENCE_NUMBER
            assert again.base_offset == next_sequence - 1
            gap = produce(stub, "idem", idempotent_batch(next_sequence + 1))
            assert gap.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
            ok = produce(stub, "idem", idempotent_batch(next_sequence))
            assert (ok.error_code, ok.base_offset) == (ErrorCode.NONE, next_sequence)

    with grpc.insecure_channel(process.address) as channel:
        stub = broker_pb2_grpc.BrokerServiceStub(channel)
        create_topic(stub, "idem", segment_bytes="2048")
        for sequence in range(30):
            result = produce(stub, "idem", idempotent_batch(sequence))
            assert (result.error_code, result.base_offset) == (ErrorCode.NONE, sequence)
    rolled = sorted(topic_dir.glob("*.producers"))
    assert 1 <= len(rolled) <= 2, "segment rolls take snapshots (two are kept)"

    assert process.terminate() == 0
    snapshots = sorted(topic_dir.glob("*.producers"))
    assert snapshots[-1].name == f"{30:020d}.producers", "clean shutdown snapshots the LEO"
    process.start()
    check(30)  # writes 31 records in all

    process.kill()  # no shutdown snapshot: the newest one is older than the log end
    process.start()
    check(31)

    assert process.terminate() == 0
    newest = sorted(topic_dir.glob("*.producers"))[-1]
    newest.write_bytes(b"\xc1 not msgpack")
    process.start()
    check(32)
    assert not newest.exists(), "an unreadable snapshot is dropped"
    process.terminate()
