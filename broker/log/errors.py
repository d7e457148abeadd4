"""Errors raised by the storage engine, each carrying its Kafka wire error code.

Callers (the replica manager and the servicers) put `exc.code` into the per-partition
error field of a response; nothing here is ever turned into a gRPC status.
"""

from __future__ import annotations

from minikafka.errors import ErrorCode, MiniKafkaError
from minikafka.record_batch import CorruptBatchError


class OffsetOutOfRangeError(MiniKafkaError):
    """A read or log-start change asked for an offset outside [log start, log end]."""

    default_code = ErrorCode.OFFSET_OUT_OF_RANGE


class CorruptRecordError(CorruptBatchError):
    """An appended record set failed validation (length, magic, CRC or header field)."""

    default_code = ErrorCode.CORRUPT_MESSAGE


class RecordTooLargeError(MiniKafkaError):
    """A batch is larger than the partition's `max_message_bytes`."""

    default_code = ErrorCode.MESSAGE_TOO_LARGE


class InvalidRecordError(MiniKafkaError):
    """A record set is structurally acceptable but not appendable (e.g. empty)."""

    default_code = ErrorCode.INVALID_RECORD


class InvalidTimestampError(MiniKafkaError):
    """A CreateTime batch's timestamp is outside message.timestamp.before/after.max.ms."""

    default_code = ErrorCode.INVALID_TIMESTAMP


class LogStorageError(MiniKafkaError):
    """The data directory cannot be read or written as required."""

    default_code = ErrorCode.KAFKA_STORAGE_ERROR


class InconsistentOffsetError(MiniKafkaError):
    """A follower append does not start at the log end offset or is not contiguous."""

    default_code = ErrorCode.UNKNOWN_SERVER_ERROR


class InconsistentEpochError(MiniKafkaError):
    """A follower append carries a batch of an older leader epoch than the log's latest:
    refused, so the epoch cache is never rewritten backwards (a stale answer)."""

    default_code = ErrorCode.UNKNOWN_SERVER_ERROR


class DataDirLockedError(LogStorageError):
    """Another process (or another LogManager) holds the lock on the data directory."""
