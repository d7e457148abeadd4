"""Topic name and config validation table (the one home: `minikafka.topic_config`)."""

from __future__ import annotations

import pytest

from minikafka.errors import ErrorCode, MiniKafkaError
from minikafka.limits import TopicLimits
from minikafka.topic_config import validate_topic_configs, validate_topic_name


@pytest.mark.parametrize(
    "name",
    ["orders", "a", "A.b_c-1", "x" * 249],
    ids=["plain", "one-char", "all-classes", "max-length"],
)
def test_valid_topic_names(name: str) -> None:
    validate_topic_name(name)


@pytest.mark.parametrize(
    "name",
    ["", ".", "..", "x" * 250, "has space", "slash/", "ünï"],
    ids=["empty", "dot", "dotdot", "too-long", "space", "slash", "non-ascii"],
)
def test_invalid_topic_names(name: str) -> None:
    with pytest.raises(MiniKafkaError) as raised:
        validate_topic_name(name)
    assert raised.value.code is ErrorCode.INVALID_TOPIC_EXCEPTION


@pytest.mark.parametrize(
    ("configs", "rf", "expected"),
    [
        pytest.param({}, 1, {}, id="empty"),
        pytest.param({"min.insync.replicas": "2"}, 3, {"min.insync.replicas": "2"}, id="min-isr"),
        pytest.param(
            {"min.insync.replicas": "3"}, 3, {"min.insync.replicas": "3"}, id="min-isr-eq-rf"
        ),
        pytest.param(
            {"unclean.leader.election.enable": "TRUE"},
            1,
            {"unclean.leader.election.enable": "true"},
            id="bool-normalised",
        ),
        pytest.param({"retention.ms": "-1"}, 1, {"retention.ms": "-1"}, id="retention-forever"),
        pytest.param({"retention.bytes": " 1024 "}, 1, {"retention.bytes": "1024"}, id="trimmed"),
        pytest.param({"segment.bytes": "1048576"}, 1, {"segment.bytes": "1048576"}, id="segment"),
        pytest.param({"flush.policy": "fsync"}, 1, {"flush.policy": "fsync"}, id="fsync"),
        pytest.param(
            {"message.timestamp.type": "LogAppendTime"},
            1,
            {"message.timestamp.type": "LogAppendTime"},
            id="log-append-time",
        ),
        pytest.param({"cleanup.policy": "delete"}, 1, {"cleanup.policy": "delete"}, id="delete"),
        pytest.param(
            {
                "flush.messages": "1",
                "flush.ms": "0",
                "segment.ms": "60000",
                "segment.bytes": "1048576",
                "max.message.bytes": "1024",
            },
            1,
            {
                "flush.messages": "1",
                "flush.ms": "0",
                "segment.ms": "60000",
                "segment.bytes": "1048576",
                "max.message.bytes": "1024",
            },
            id="numbers-at-minimum",
        ),
        pytest.param(
            {"flush.messages": "-1", "flush.ms": "-1"},
            1,
            {"flush.messages": "-1", "flush.ms": "-1"},
            id="flush-never",
        ),
        pytest.param(
            {"message.timestamp.before.max.ms": "0", "message.timestamp.after.max.ms": "5000"},
            1,
            {"message.timestamp.before.max.ms": "0", "message.timestamp.after.max.ms": "5000"},
            id="timestamp-bounds",
        ),
    ],
)
def test_valid_configs(configs: dict[str, str], rf: int, expected: dict[str, str]) -> None:
    assert validate_topic_configs(configs, replication_factor=rf) == expected


@pytest.mark.parametrize(
    ("configs", "rf", "message"),
    [
        pytest.param({"bogus.key": "1"}, 1, "unknown topic config 'bogus.key'", id="unknown-key"),
        pytest.param(
            {"min.insync.replicas": "3"},
            2,
            "min.insync.replicas 3 is larger than the replication factor 2",
            id="min-isr-above-rf",
        ),
        pytest.param({"min.insync.replicas": "0"}, 1, "min.insync.replicas", id="min-isr-zero"),
        pytest.param({"min.insync.replicas": "two"}, 3, "expected an integer", id="not-int"),
        pytest.param({"unclean.leader.election.enable": "yes"}, 1, "unclean.leader", id="bad-bool"),
        pytest.param({"retention.ms": "-2"}, 1, "retention.ms", id="retention-below-minus-one"),
        pytest.param({"segment.bytes": "10"}, 1, "segment.bytes", id="segment-too-small"),
        pytest.param({"segment.bytes": str(2**31)}, 1, "segment.bytes", id="segment-over-int32"),
        pytest.param({"flush.policy": "always"}, 1, "flush.policy", id="bad-flush-policy"),
        pytest.param(
            {"message.timestamp.type": "createtime"}, 1, "message.timestamp.type", id="case"
        ),
        pytest.param({"cleanup.policy": "compact"}, 1, "cleanup.policy", id="compact"),
        pytest.param({"flush.messages": "0"}, 1, "flush.messages", id="flush-messages-zero"),
        pytest.param({"flush.ms": "-2"}, 1, "flush.ms", id="flush-ms-below-never"),
        pytest.param(
            {"max.message.bytes": "0"},
            1,
            "value 0 for max.message.bytes",
            id="max-message-bytes-zero",
        ),
        pytest.param(
            {"max.message.bytes": str(2**31 - 1)},
            1,
            "must be between 1024 and 66060288",
            id="max-message-bytes-beyond-grpc",
        ),
        pytest.param(
            {"segment.ms": "1"}, 1, "(limit min.segment.ms=60000)", id="segment-ms-below-limit"
        ),
        pytest.param(
            {"segment.bytes": "1024"},
            1,
            "(limit min.segment.bytes=1048576)",
            id="segment-bytes-below-limit",
        ),
        pytest.param(
            {"message.timestamp.after.max.ms": "-1"},
            1,
            "message.timestamp.after.max.ms",
            id="timestamp-bound-negative",
        ),
    ],
)
def test_invalid_configs(configs: dict[str, str], rf: int, message: str) -> None:
    with pytest.raises(MiniKafkaError) as raised:
        validate_topic_configs(configs, replication_factor=rf)
    assert raised.value.code is ErrorCode.INVALID_CONFIG
    assert message in raised.value.message


def test_segment_minima_follow_the_limits() -> None:
    limits = TopicLimits(min_segment_bytes=1024, min_segment_ms=1)
    configs = {"segment.bytes": "1024", "segment.ms": "1"}
    assert validate_topic_configs(configs, replication_factor=1, limits=limits) == configs
