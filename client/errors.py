"""The client's error hierarchy: one class per wire error code, with kafka-python's names.

Every class derives from `MiniKafkaClientError` (alias `KafkaError`), itself a
`minikafka.errors.MiniKafkaError`, and carries as class attributes `errno` (Kafka's
numeric code), `retriable` and `invalid_metadata` (refresh metadata before retrying).
`for_code(code)` maps a numeric code from a response to its class. Client-side
conditions with no wire code (`KafkaTimeoutError`, `NoBrokersAvailable`,
`LogTruncationError`, ...) are part of the same hierarchy.
"""

from __future__ import annotations

import difflib
import inspect
import re
from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from minikafka.errors import (
    INVALID_METADATA_CODES,
    RETRIABLE_CODES,
    ErrorCode,
    MiniKafkaError,
    code_from_wire,
    is_known_code,
)

if TYPE_CHECKING:
    from client.records import TopicPartition


class MiniKafkaClientError(MiniKafkaError):
    """Base of every error the client raises.

    `errno`, `retriable` and `invalid_metadata` are class attributes derived from
    `default_code` unless a subclass sets them itself.
    """

    errno: ClassVar[int] = int(ErrorCode.UNKNOWN_SERVER_ERROR)
    retriable: ClassVar[bool] = False
    invalid_metadata: ClassVar[bool] = False
    #: On the error of a produced record: True when some attempt to write it may have
    #: been written (the broker answered after appending it, or no answer came), so the
    #: record may still appear in the log; False when every attempt was refused before
    #: anything was appended (the record was definitely not written).
    indefinite: bool = False

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        own = cls.__dict__
        if "errno" not in own:
            cls.errno = int(cls.default_code)
        if "retriable" not in own:
            cls.retriable = cls.default_code in RETRIABLE_CODES
        if "invalid_metadata" not in own:
            cls.invalid_metadata = cls.default_code in INVALID_METADATA_CODES

    @property
    def description(self) -> str:
        return self.code.name


#: kafka-python's name for the base class.
KafkaError = MiniKafkaClientError


class BrokerResponseError(MiniKafkaClientError):
    """An error code returned by a broker for a partition, topic or request."""


# ---- one class per wire code --------------------------------------------------------


class UnknownServerError(BrokerResponseError):
    default_code = ErrorCode.UNKNOWN_SERVER_ERROR


class OffsetOutOfRangeError(BrokerResponseError):
    default_code = ErrorCode.OFFSET_OUT_OF_RANGE


class CorruptMessageError(BrokerResponseError):
    """CORRUPT_MESSAGE from a broker: a batch it was sent or read failed validation."""

    default_code = ErrorCode.CORRUPT_MESSAGE


class UnknownTopicOrPartitionError(BrokerResponseError):
    default_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


class InvalidFetchRequestError(BrokerResponseError):
    default_code = ErrorCode.INVALID_FETCH_SIZE


class LeaderNotAvailableError(BrokerResponseError):
    default_code = ErrorCode.LEADER_NOT_AVAILABLE


class NotLeaderOrFollowerError(BrokerResponseError):
    default_code = ErrorCode.NOT_LEADER_OR_FOLLOWER


#: kafka-python's (and aiokafka's) older name.
NotLeaderForPartitionError = NotLeaderOrFollowerError


class RequestTimedOutError(BrokerResponseError):
    default_code = ErrorCode.REQUEST_TIMED_OUT


class BrokerNotAvailableError(BrokerResponseError):
    default_code = ErrorCode.BROKER_NOT_AVAILABLE


class ReplicaNotAvailableError(BrokerResponseError):
    default_code = ErrorCode.REPLICA_NOT_AVAILABLE


class MessageSizeTooLargeError(BrokerResponseError):
    default_code = ErrorCode.MESSAGE_TOO_LARGE


#: aiokafka's name.
RecordTooLargeError = MessageSizeTooLargeError


class StaleControllerEpochError(BrokerResponseError):
    default_code = ErrorCode.STALE_CONTROLLER_EPOCH


class NetworkExceptionError(BrokerResponseError):
    default_code = ErrorCode.NETWORK_EXCEPTION


class InvalidTopicError(BrokerResponseError):
    default_code = ErrorCode.INVALID_TOPIC_EXCEPTION


class RecordListTooLargeError(BrokerResponseError):
    default_code = ErrorCode.RECORD_LIST_TOO_LARGE


class NotEnoughReplicasError(BrokerResponseError):
    default_code = ErrorCode.NOT_ENOUGH_REPLICAS


class NotEnoughReplicasAfterAppendError(BrokerResponseError):
    default_code = ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND


class InvalidRequiredAcksError(BrokerResponseError):
    default_code = ErrorCode.INVALID_REQUIRED_ACKS


class TopicAuthorizationFailedError(BrokerResponseError):
    default_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED


class GroupAuthorizationFailedError(BrokerResponseError):
    default_code = ErrorCode.GROUP_AUTHORIZATION_FAILED


class ClusterAuthorizationFailedError(BrokerResponseError):
    default_code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED


class InvalidTimestampError(BrokerResponseError):
    default_code = ErrorCode.INVALID_TIMESTAMP


class UnsupportedVersionError(BrokerResponseError):
    default_code = ErrorCode.UNSUPPORTED_VERSION


class TopicAlreadyExistsError(BrokerResponseError):
    default_code = ErrorCode.TOPIC_ALREADY_EXISTS


class InvalidPartitionsError(BrokerResponseError):
    default_code = ErrorCode.INVALID_PARTITIONS


class InvalidReplicationFactorError(BrokerResponseError):
    default_code = ErrorCode.INVALID_REPLICATION_FACTOR


class InvalidReplicaAssignmentError(BrokerResponseError):
    default_code = ErrorCode.INVALID_REPLICA_ASSIGNMENT


class InvalidConfigurationError(BrokerResponseError):
    default_code = ErrorCode.INVALID_CONFIG


class NotControllerError(BrokerResponseError):
    default_code = ErrorCode.NOT_CONTROLLER


class InvalidRequestError(BrokerResponseError):
    default_code = ErrorCode.INVALID_REQUEST


class PolicyViolationError(BrokerResponseError):
    default_code = ErrorCode.POLICY_VIOLATION


class OutOfOrderSequenceNumberError(BrokerResponseError):
    default_code = ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


class DuplicateSequenceNumberError(BrokerResponseError):
    default_code = ErrorCode.DUPLICATE_SEQUENCE_NUMBER


class InvalidProducerEpochError(BrokerResponseError):
    default_code = ErrorCode.INVALID_PRODUCER_EPOCH


class KafkaStorageError(BrokerResponseError):
    default_code = ErrorCode.KAFKA_STORAGE_ERROR


class UnknownProducerIdError(BrokerResponseError):
    default_code = ErrorCode.UNKNOWN_PRODUCER_ID


class FencedLeaderEpochError(BrokerResponseError):
    default_code = ErrorCode.FENCED_LEADER_EPOCH


class UnknownLeaderEpochError(BrokerResponseError):
    default_code = ErrorCode.UNKNOWN_LEADER_EPOCH


class UnsupportedCompressionTypeError(BrokerResponseError):
    default_code = ErrorCode.UNSUPPORTED_COMPRESSION_TYPE


class StaleBrokerEpochError(BrokerResponseError):
    default_code = ErrorCode.STALE_BROKER_EPOCH


class OffsetNotAvailableError(BrokerResponseError):
    default_code = ErrorCode.OFFSET_NOT_AVAILABLE


class PreferredLeaderNotAvailableError(BrokerResponseError):
    default_code = ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE


class EligibleLeadersNotAvailableError(BrokerResponseError):
    default_code = ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE


class ElectionNotNeededError(BrokerResponseError):
    default_code = ErrorCode.ELECTION_NOT_NEEDED


class InvalidRecordError(BrokerResponseError):
    default_code = ErrorCode.INVALID_RECORD


class InvalidUpdateVersionError(BrokerResponseError):
    default_code = ErrorCode.INVALID_UPDATE_VERSION


class DuplicateBrokerRegistrationError(BrokerResponseError):
    default_code = ErrorCode.DUPLICATE_BROKER_REGISTRATION


class BrokerIdNotRegisteredError(BrokerResponseError):
    default_code = ErrorCode.BROKER_ID_NOT_REGISTERED


class IneligibleReplicaError(BrokerResponseError):
    default_code = ErrorCode.INELIGIBLE_REPLICA


# Group coordinator and membership codes (kafka-python's class names).


class CoordinatorLoadInProgressError(BrokerResponseError):
    default_code = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS


class CoordinatorNotAvailableError(BrokerResponseError):
    default_code = ErrorCode.COORDINATOR_NOT_AVAILABLE


class NotCoordinatorError(BrokerResponseError):
    default_code = ErrorCode.NOT_COORDINATOR


class InvalidGroupIdError(BrokerResponseError):
    default_code = ErrorCode.INVALID_GROUP_ID


class UnknownMemberIdError(BrokerResponseError):
    default_code = ErrorCode.UNKNOWN_MEMBER_ID


class InvalidSessionTimeoutError(BrokerResponseError):
    default_code = ErrorCode.INVALID_SESSION_TIMEOUT


class NonEmptyGroupError(BrokerResponseError):
    default_code = ErrorCode.NON_EMPTY_GROUP


class GroupIdNotFoundError(BrokerResponseError):
    default_code = ErrorCode.GROUP_ID_NOT_FOUND


class GroupMaxSizeReachedError(BrokerResponseError):
    default_code = ErrorCode.GROUP_MAX_SIZE_REACHED


class FencedMemberEpochError(BrokerResponseError):
    default_code = ErrorCode.FENCED_MEMBER_EPOCH


class UnreleasedInstanceIdError(BrokerResponseError):
    default_code = ErrorCode.UNRELEASED_INSTANCE_ID


class UnsupportedAssignorError(BrokerResponseError):
    default_code = ErrorCode.UNSUPPORTED_ASSIGNOR


class StaleMemberEpochError(BrokerResponseError):
    default_code = ErrorCode.STALE_MEMBER_EPOCH


# ---- client-side conditions ---------------------------------------------------------


class KafkaTimeoutError(MiniKafkaClientError, TimeoutError):  # type: ignore[misc]
    """A client-side deadline passed (delivery timeout, max block, request timeout).

    Also a `TimeoutError`, so code written for `concurrent.futures` catches it.
    """

    default_code = ErrorCode.REQUEST_TIMED_OUT
    retriable = True
    invalid_metadata = False


class KafkaConnectionError(MiniKafkaClientError):
    """A broker could not be reached, or the connection broke during a call."""

    default_code = ErrorCode.NETWORK_EXCEPTION
    retriable = True
    invalid_metadata = True


class NoBrokersAvailable(KafkaConnectionError):
    """None of the bootstrap or known brokers answered."""


class IllegalStateError(MiniKafkaClientError):
    """The client was used in a state that does not allow the call (closed, not started)."""

    retriable = False
    invalid_metadata = False


class CommitFailedError(MiniKafkaClientError):
    """An offset commit was refused because this consumer is no longer the member it was
    (fenced, or its session expired): its partitions may belong to another member now.
    kafka-python's name; not retriable (poll again, which rejoins)."""

    default_code = ErrorCode.STALE_MEMBER_EPOCH
    retriable = False
    invalid_metadata = False


class KafkaConfigurationError(MiniKafkaClientError, TypeError, ValueError):
    """A client was given a config key it does not know, or a value it cannot use.

    kafka-python's name. Also a `TypeError` (what Python raises for an unexpected
    keyword argument) and a `ValueError` (what a bad value raises), so code written
    for either catches it.
    """

    default_code = ErrorCode.INVALID_CONFIG
    retriable = False
    invalid_metadata = False


#: kafka-python config keys the client does not support yet, with why.
_UNSUPPORTED_HINTS: Mapping[str, str] = {
    "sasl_mechanism": "minikafka has no SASL: authenticate with a TLS client certificate "
    "(security_protocol='SSL', ssl_certfile, ssl_keyfile)",
    "api_version": "minikafka speaks gRPC, not the Kafka protocol: there is no API version",
}


def check_config_keys(owner: str, config: Mapping[str, Any], target: Callable[..., Any]) -> None:
    """Raise `KafkaConfigurationError` naming every key of `config` that `target`
    (the constructor the keys are passed on to) does not accept, with the closest
    valid names; as kafka-python does for unrecognized configs."""
    parameters = inspect.signature(target).parameters
    accepted = {
        name
        for name, p in parameters.items()
        if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) and name != "self"
    }
    unknown = sorted(k for k in config if k not in accepted)
    if unknown:
        raise unknown_config_error(owner, unknown, accepted)


def unknown_config_error(
    owner: str, unknown: Collection[str], accepted: Collection[str]
) -> KafkaConfigurationError:
    parts = []
    for key in unknown:
        hint = _UNSUPPORTED_HINTS.get(key)
        close = difflib.get_close_matches(key, sorted(accepted), n=1)
        if hint:
            parts.append(f"{key!r} ({hint})")
        elif close:
            parts.append(f"{key!r} (did you mean {close[0]!r}?)")
        else:
            parts.append(repr(key))
    return KafkaConfigurationError(
        f"{owner}: unrecognized config key(s) {', '.join(parts)}; "
        f"valid keys: {', '.join(sorted(accepted))}"
    )


class ProducerClosedError(IllegalStateError):
    """`send()` after `close()` / `stop()`."""


class ConsumerStoppedError(IllegalStateError):
    """The consumer was closed while a call waited on it."""


class NoOffsetForPartitionError(MiniKafkaClientError):
    """The partition has no position and `auto_offset_reset` is "none"."""

    default_code = ErrorCode.OFFSET_OUT_OF_RANGE
    retriable = False
    invalid_metadata = False

    def __init__(self, tp: TopicPartition) -> None:
        self.tp = tp
        super().__init__(f"no position for {tp.topic}-{tp.partition} and auto_offset_reset='none'")


class RecordDeserializationError(MiniKafkaClientError):
    """The consumer's `key_deserializer` or `value_deserializer` failed on the record
    at `offset` of `tp` (the original exception is the `__cause__`).

    As Kafka's `RecordDeserializationException`: the records before it are delivered,
    the position stays at the failing record and every poll raises this again until
    the user seeks past it (`consumer.seek(tp, error.offset + 1)`).
    """

    retriable = False
    invalid_metadata = False

    def __init__(self, tp: TopicPartition, offset: int, cause: BaseException) -> None:
        self.tp = tp
        self.offset = offset
        super().__init__(
            f"cannot deserialize the record at offset {offset} of {tp.topic}-{tp.partition}: "
            f"{type(cause).__name__}: {cause} (seek to {offset + 1} to skip it)"
        )
        self.__cause__ = cause


class CorruptRecordError(CorruptMessageError):
    """The consumer met a damaged batch at `offset` of `topic_partition` (a CRC that does
    not match, a header that lies about its records, a body that does not decode).

    As for `RecordDeserializationError`: the records before it are delivered, the
    position stays at `offset` and every poll raises this again (other partitions keep
    being served) until the user seeks past it; `next_offset` is where the damaged batch
    claims to end (-1 when its header is damaged too), the offset to seek to.
    """

    retriable = False

    def __init__(
        self, tp: TopicPartition, offset: int, detail: str = "", *, next_offset: int = -1
    ) -> None:
        self.topic_partition = self.tp = tp
        self.offset = offset
        self.next_offset = next_offset
        skip_to = next_offset if next_offset > offset else offset + 1
        super().__init__(
            f"corrupt record batch at offset {offset} of {tp.topic}-{tp.partition}"
            + (f": {detail}" if detail else "")
            + f" (seek to {skip_to} to skip it)"
        )


class LogTruncationError(MiniKafkaClientError):
    """The log was truncated under the consumer (e.g. after an unclean election).

    The consumer had consumed up to `offset` (its position), but the leader's log
    diverges from what it read at `divergent_offset`: records in
    `[divergent_offset, offset)` that the consumer saw no longer exist.
    """

    default_code = ErrorCode.OFFSET_OUT_OF_RANGE
    retriable = False
    invalid_metadata = False

    def __init__(self, tp: TopicPartition, offset: int, divergent_offset: int) -> None:
        self.tp = tp
        self.offset = offset
        self.divergent_offset = divergent_offset
        super().__init__(
            f"log of {tp.topic}-{tp.partition} was truncated under the consumer: position "
            f"{offset}, the leader's log diverges at offset {divergent_offset}"
        )


def _code_classes() -> dict[int, type[BrokerResponseError]]:
    table: dict[int, type[BrokerResponseError]] = {}
    pending: list[type[BrokerResponseError]] = [BrokerResponseError]
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if cls is not BrokerResponseError:
            table.setdefault(int(cls.default_code), cls)
    return table


_BY_CODE: dict[int, type[BrokerResponseError]] = _code_classes()


def for_code(code: int) -> type[BrokerResponseError]:
    """The error class for a numeric wire code (`UnknownServerError` for unknown codes)."""
    return _BY_CODE.get(code, UnknownServerError)


def from_response(code: int, message: str = "", *, context: str = "") -> BrokerResponseError:
    """An instance of the class for `code`, with the broker's message and our context."""
    cls = for_code(code)
    wire_code = code_from_wire(code)
    text = message or (wire_code.name if is_known_code(code) else f"unknown error code {code}")
    if context:
        text = f"{context}: {text} [{wire_code.name}]"
    return cls(text, code=wire_code)


_AUTHORIZATION_CODE = re.compile(r"\b[A-Z]+_AUTHORIZATION_FAILED\b")


def authorization_error(details: str, *, context: str) -> BrokerResponseError:
    """The error of a call the broker refused with PERMISSION_DENIED: its message names
    the Kafka code (`TOPIC_AUTHORIZATION_FAILED: ...`, see `minikafka.authorization`);
    CLUSTER_AUTHORIZATION_FAILED when it names none."""
    named = _AUTHORIZATION_CODE.search(details)
    name = named.group(0) if named is not None else ""
    code = (
        ErrorCode[name] if name in ErrorCode.__members__ else ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    )
    return for_code(int(code))(f"{context}: {details}", code=code)
