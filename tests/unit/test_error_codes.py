"""The shared ErrorCode enum and the wire enum agree name by name and number by number."""

from __future__ import annotations

from minikafka.errors import ErrorCode, MiniKafkaError
from minikafka.v1 import common_pb2


def test_python_enum_matches_proto_enum() -> None:
    proto = {name: number for name, number in common_pb2.ErrorCode.items()}
    ours = {member.name: int(member) for member in ErrorCode}
    assert ours == proto


def test_kafka_numbers_of_the_contract_codes() -> None:
    # DESIGN §3 names these numbers explicitly.
    expected = {
        "NOT_LEADER_OR_FOLLOWER": 6,
        "REQUEST_TIMED_OUT": 7,
        "NOT_ENOUGH_REPLICAS": 19,
        "NOT_ENOUGH_REPLICAS_AFTER_APPEND": 20,
        "OFFSET_OUT_OF_RANGE": 1,
        "CORRUPT_MESSAGE": 2,
        "UNKNOWN_TOPIC_OR_PARTITION": 3,
        "MESSAGE_TOO_LARGE": 10,
        "INVALID_REQUIRED_ACKS": 21,
        "FENCED_LEADER_EPOCH": 74,
        "UNKNOWN_LEADER_EPOCH": 75,
        "STALE_CONTROLLER_EPOCH": 11,
    }
    assert {name: int(ErrorCode[name]) for name in expected} == expected


def test_error_carries_code_and_policy() -> None:
    err = MiniKafkaError("moved", code=ErrorCode.NOT_LEADER_OR_FOLLOWER)
    assert err.code is ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert err.retriable
    assert err.invalid_metadata
    fatal = MiniKafkaError(code=ErrorCode.INVALID_REQUIRED_ACKS)
    assert not fatal.retriable
    assert str(fatal) == "INVALID_REQUIRED_ACKS"
