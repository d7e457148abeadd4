"""Decoding fetched batches, the cluster view, and config validation (all pure)."""

from __future__ import annotations

import pytest

from client.metadata import ClusterView
from client.producer import AsyncProducer, parse_acks, topic_batch_size
from client.records import ConsumerRecord, TopicPartition, decode_fetched
from client.transport import parse_bootstrap
from minikafka.record_batch import HEADER_SIZE, Compression, CorruptBatchError, build_batch, stamp
from minikafka.v1 import broker_pb2, common_pb2


def stamped(base: int, epoch: int, values: list[bytes], **kw: object) -> bytes:
    batch = build_batch([(1000 + i, b"k", v, None) for i, v in enumerate(values)], **kw)  # type: ignore[arg-type]
    return stamp(batch, base_offset=base, leader_epoch=epoch)


def test_decode_skips_records_below_the_position() -> None:
    data = stamped(10, 1, [b"a", b"b", b"c"]) + stamped(13, 2, [b"d", b"e"])
    fetched = decode_fetched("t", 0, data, position=12)
    assert [(r.offset, r.value, r.leader_epoch) for r in fetched.records] == [
        (12, b"c", 1),
        (13, b"d", 2),
        (14, b"e", 2),
    ]
    assert fetched.next_fetch_offset == 15
    assert fetched.last_epoch == 2
    assert fetched.records[0] == ConsumerRecord("t", 0, 12, 1002, 0, b"k", b"c", (), 1)


def test_decode_applies_deserializers_and_compression() -> None:
    data = stamped(0, 0, [b"1", b"2"], compression=Compression.LZ4)
    fetched = decode_fetched(
        "t", 0, data, position=0, key_deserializer=bytes.decode, value_deserializer=int
    )
    assert [(r.key, r.value) for r in fetched.records] == [("k", 1), ("k", 2)]


def test_decode_log_append_time_batches_use_the_brokers_timestamp() -> None:
    batch = build_batch([(1000 + i, None, b"v%d" % i, None) for i in range(3)])
    data = stamp(batch, base_offset=5, leader_epoch=1, log_append_time_ms=77)
    fetched = decode_fetched("t", 0, data, position=6)
    assert [(r.offset, r.timestamp, r.timestamp_type, r.value) for r in fetched.records] == [
        (6, 77, 1, b"v1"),
        (7, 77, 1, b"v2"),
    ]


def test_decode_whole_batch_below_position_returns_nothing() -> None:
    fetched = decode_fetched("t", 0, stamped(0, 0, [b"a"]), position=5)
    assert fetched.records == []


def test_decode_rejects_a_corrupt_batch() -> None:
    data = bytearray(stamped(0, 0, [b"hello"]))
    data[-1] ^= 0xFF
    with pytest.raises(CorruptBatchError):
        decode_fetched("t", 0, bytes(data), position=0)


def metadata() -> broker_pb2.MetadataResponse:
    return broker_pb2.MetadataResponse(
        cluster_id="c",
        controller_id=0,
        brokers=[
            common_pb2.BrokerEndpoint(broker_id=1, host="h1", port=1, rack="a"),
            common_pb2.BrokerEndpoint(broker_id=2, host="h2", port=2, rack="b"),
            common_pb2.BrokerEndpoint(broker_id=3, host="h3", port=3, rack="c"),
        ],
        topics=[
            common_pb2.TopicMetadata(
                name="t",
                partitions=[
                    common_pb2.PartitionMetadata(
                        partition=1, leader=1, leader_epoch=4, replicas=[1, 2, 3], isr=[1, 2]
                    ),
                    common_pb2.PartitionMetadata(
                        partition=0, leader=-1, leader_epoch=2, replicas=[2, 3], isr=[]
                    ),
                ],
            )
        ],
    )


def test_cluster_view_leaders_and_partitions() -> None:
    view = ClusterView.from_response(metadata())
    assert view.partitions_for("t") == [0, 1]
    assert view.partitions_for("missing") is None
    assert view.available_partitions("t") == [1]
    leader = view.leader("t", 1)
    assert leader is not None
    assert leader.address == "h1:1"
    assert view.leader("t", 0) is None


@pytest.mark.parametrize(
    ("sent", "moved"),
    [
        ([(1, 4)], False),
        ([(1, 3)], True),
        ([(0, 2), (1, 4)], False),
        ([(0, 1), (1, 4)], True),
        ([(1, -1)], True),  # sent with no known epoch: any known leader is newer
        ([(7, 0)], False),  # a partition the view does not know
    ],
)
def test_leader_moved_compares_the_sent_epochs(sent: list[tuple[int, int]], moved: bool) -> None:
    view = ClusterView.from_response(metadata())
    assert view.leader_moved([(TopicPartition("t", p), e) for p, e in sent]) is moved


@pytest.mark.parametrize(
    ("rack", "expected"),
    [(None, 1), ("a", 1), ("b", 2), ("c", 1)],
    ids=["no-rack", "leader-rack", "isr-follower-rack", "out-of-sync-rack-uses-leader"],
)
def test_read_replica_prefers_same_rack_in_sync_replica(rack: str | None, expected: int) -> None:
    view = ClusterView.from_response(metadata())
    replica = view.read_replica("t", 1, rack)
    assert replica is not None
    assert replica.broker_id == expected


def test_merged_view_keeps_topics_not_refreshed() -> None:
    old = ClusterView.from_response(metadata())
    fresh = ClusterView.from_response(
        broker_pb2.MetadataResponse(
            brokers=[common_pb2.BrokerEndpoint(broker_id=1, host="h1", port=1)],
            topics=[common_pb2.TopicMetadata(name="u")],
        )
    )
    merged = old.merged(fresh, ["u"])
    assert set(merged.topics) == {"t", "u"}


@pytest.mark.parametrize(
    ("given", "wire"), [("all", -1), (-1, -1), (0, 0), (1, 1), ("1", 1), ("ALL", -1)]
)
def test_parse_acks(given: int | str, wire: int) -> None:
    assert parse_acks(given) == wire


@pytest.mark.parametrize("bad", [2, "some", -2])
def test_parse_acks_rejects(bad: int | str) -> None:
    with pytest.raises(ValueError, match="acks"):
        parse_acks(bad)


def test_parse_bootstrap_forms() -> None:
    assert parse_bootstrap("a:1, b:2") == ["a:1", "b:2"]
    assert parse_bootstrap(["a:1", "b:2,c:3"]) == ["a:1", "b:2", "c:3"]


@pytest.mark.parametrize("bad", ["", "host", "host:", ":9", "h:70000", "h:x"])
def test_parse_bootstrap_rejects(bad: str) -> None:
    with pytest.raises(ValueError, match="bootstrap"):
        parse_bootstrap(bad)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"acks": 1, "enable_idempotence": True}, "requires acks"),
        ({"max_in_flight_requests_per_connection": 6, "enable_idempotence": True}, "<= 5"),
        ({"compression_type": "snappy"}, "compression"),
        ({"delivery_timeout_ms": 1000}, "delivery_timeout_ms"),
        ({"batch_size": 0}, "batch_size"),
    ],
    ids=["idempotence-needs-acks-all", "in-flight-limit", "codec", "delivery-timeout", "batch"],
)
def test_producer_config_validation(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        AsyncProducer("h:1", **kwargs)  # type: ignore[arg-type]


def test_idempotence_defaults_follow_acks() -> None:
    assert AsyncProducer("h:1").idempotent
    assert not AsyncProducer("h:1", acks=1).idempotent


def view_with_configs(configs: dict[str, str], reported_limit: int = 0) -> ClusterView:
    return ClusterView.from_response(
        broker_pb2.MetadataResponse(
            brokers=[common_pb2.BrokerEndpoint(broker_id=1, host="h", port=1)],
            topics=[
                common_pb2.TopicMetadata(
                    name="t",
                    configs=configs,
                    max_message_bytes=reported_limit,
                    partitions=[common_pb2.PartitionMetadata(partition=0, leader=1, isr=[1])],
                )
            ],
        )
    )


@pytest.mark.parametrize(
    ("configs", "reported", "topic", "expected"),
    [
        ({}, 0, "t", 1 << 20),
        ({"max.message.bytes": "5000"}, 0, "t", 5000 - HEADER_SIZE),
        ({"max.message.bytes": str(4 << 20)}, 0, "t", 1 << 20),
        ({"max.message.bytes": "10"}, 0, "t", 1),
        ({"max.message.bytes": "junk"}, 0, "t", 1 << 20),
        ({"max.message.bytes": "5000"}, 0, "unknown", 1 << 20),
        ({}, 200_000, "t", 200_000 - HEADER_SIZE),
        ({"max.message.bytes": "5000"}, 200_000, "t", 5000 - HEADER_SIZE),
    ],
    ids=[
        "no-config",
        "smaller-limit",
        "larger-limit",
        "tiny-limit",
        "not-a-number",
        "no-topic",
        "broker-default-reported",
        "override-wins",
    ],
)
def test_topic_batch_size_fits_max_message_bytes(
    configs: dict[str, str], reported: int, topic: str, expected: int
) -> None:
    view = view_with_configs(configs, reported)
    assert topic_batch_size(1 << 20, view, topic) == expected
