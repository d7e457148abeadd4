"""The client error hierarchy: one class per code, kafka-python names and attributes."""

from __future__ import annotations

import pytest

from client import errors
from client.records import TopicPartition
from minikafka.errors import ErrorCode, MiniKafkaError

ERROR_CODES = [c for c in ErrorCode if c is not ErrorCode.NONE]


@pytest.mark.parametrize("code", ERROR_CODES, ids=[c.name for c in ERROR_CODES])
def test_every_wire_code_has_its_own_class(code: ErrorCode) -> None:
    cls = errors.for_code(int(code))
    assert cls.errno == int(code)
    assert cls.default_code is code
    assert issubclass(cls, errors.MiniKafkaClientError)
    assert issubclass(cls, MiniKafkaError)


@pytest.mark.parametrize(
    ("cls", "code", "retriable", "invalid_metadata"),
    [
        (errors.NotLeaderForPartitionError, 6, True, True),
        (errors.NotLeaderOrFollowerError, 6, True, True),
        (errors.RequestTimedOutError, 7, True, False),
        (errors.NotEnoughReplicasError, 19, True, False),
        (errors.NotEnoughReplicasAfterAppendError, 20, True, False),
        (errors.UnknownTopicOrPartitionError, 3, True, True),
        (errors.OffsetOutOfRangeError, 1, False, False),
        (errors.CorruptMessageError, 2, True, False),
        (errors.MessageSizeTooLargeError, 10, False, False),
        (errors.FencedLeaderEpochError, 74, True, True),
        (errors.UnknownLeaderEpochError, 75, True, True),
        (errors.OutOfOrderSequenceNumberError, 45, False, False),
        (errors.DuplicateSequenceNumberError, 46, False, False),
        (errors.TopicAlreadyExistsError, 36, False, False),
    ],
    ids=lambda v: getattr(v, "__name__", str(v)),
)
def test_class_attributes_follow_kafka(
    cls: type[errors.MiniKafkaClientError], code: int, retriable: bool, invalid_metadata: bool
) -> None:
    assert cls.errno == code
    assert cls.retriable is retriable
    assert cls.invalid_metadata is invalid_metadata
    instance = cls("boom")
    assert instance.code == code
    assert instance.retriable is retriable


def test_for_code_unknown_code_is_unknown_server_error() -> None:
    assert errors.for_code(12345) is errors.UnknownServerError


def test_from_response_carries_code_message_and_context() -> None:
    error = errors.from_response(6, "leader is 2", context="Produce t-0")
    assert isinstance(error, errors.NotLeaderForPartitionError)
    assert error.code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert "leader is 2" in str(error)
    assert "Produce t-0" in str(error)
    assert "NOT_LEADER_OR_FOLLOWER" in str(error)


def test_client_side_errors() -> None:
    timeout = errors.KafkaTimeoutError("late")
    assert isinstance(timeout, TimeoutError)
    assert errors.KafkaTimeoutError.retriable
    assert issubclass(errors.NoBrokersAvailable, errors.KafkaConnectionError)
    tp = TopicPartition("t", 3)
    truncation = errors.LogTruncationError(tp, 120, 100)
    assert (truncation.tp, truncation.offset, truncation.divergent_offset) == (tp, 120, 100)
    assert "t-3" in str(truncation)
    assert not truncation.retriable


def test_a_corrupt_record_error_says_where_and_how_to_skip_it() -> None:
    tp = TopicPartition("t", 1)
    error = errors.CorruptRecordError(tp, 40, "CRC mismatch", next_offset=1040)
    assert (error.topic_partition, error.offset, error.next_offset) == (tp, 40, 1040)
    assert error.errno == ErrorCode.CORRUPT_MESSAGE
    assert isinstance(error, errors.CorruptMessageError)
    assert not error.retriable  # only a seek gets the consumer past it
    assert str(error) == (
        "corrupt record batch at offset 40 of t-1: CRC mismatch (seek to 1040 to skip it)"
    )
    assert "(seek to 41 to skip it)" in str(errors.CorruptRecordError(tp, 40))
    assert errors.for_code(2) is errors.CorruptMessageError
