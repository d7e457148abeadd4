"""The shared ErrorCode enum and the wire enum agree name by name and number by number."""

from __future__ import annotations

from pathlib import Path

import pytest

from minikafka.errors import ErrorCode, MiniKafkaError, code_from_wire, code_name, is_known_code
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


@pytest.mark.parametrize(
    ("wire", "code", "name", "known"),
    [
        pytest.param(0, ErrorCode.NONE, "NONE", True, id="none"),
        pytest.param(
            6, ErrorCode.NOT_LEADER_OR_FOLLOWER, "NOT_LEADER_OR_FOLLOWER", True, id="known"
        ),
        pytest.param(
            -1, ErrorCode.UNKNOWN_SERVER_ERROR, "UNKNOWN_SERVER_ERROR", True, id="minus-1"
        ),
        pytest.param(
            9999, ErrorCode.UNKNOWN_SERVER_ERROR, "error code 9999", False, id="newer-peer"
        ),
        pytest.param(-7, ErrorCode.UNKNOWN_SERVER_ERROR, "error code -7", False, id="negative"),
    ],
)
def test_one_mapping_from_wire_numbers(wire: int, code: ErrorCode, name: str, known: bool) -> None:
    assert code_from_wire(wire) is code
    assert code_name(wire) == name
    assert is_known_code(wire) is known


def test_no_module_keeps_its_own_code_lookup() -> None:
    """One home for the wire-number -> ErrorCode mapping: `minikafka.errors`."""
    root = Path(__file__).resolve().parents[2]
    offenders = [
        str(path.relative_to(root))
        for package in ("minikafka", "minikafka_cli", "broker", "controller", "client")
        for path in (root / package).rglob("*.py")
        if "v1" not in path.parts
        and path != root / "minikafka" / "errors.py"
        and "ErrorCode._value2member_map_" in path.read_text()
    ]
    assert offenders == []
