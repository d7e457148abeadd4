"""The producer's response policy (PURE): every error code, every batch state, every way
a call can fail. Each outcome is summarized as (kind, flag, error class):

- complete: ("complete", None, None)
- retry / refresh-then-retry: (kind, maybe_written, error class), backoff checked apart
- bump-epoch-then-retry: ("bump-epoch", None, error class)
- fail: ("fail", indefinite, error class)
"""

from __future__ import annotations

import grpc
import pytest

from client.errors import (
    IllegalStateError,
    KafkaConnectionError,
    KafkaTimeoutError,
    OutOfOrderSequenceNumberError,
)
from client.produce_policy import (
    BatchState,
    BumpEpochThenRetry,
    Complete,
    Fail,
    Outcome,
    PartitionAnswer,
    RefreshThenRetry,
    Retry,
    RetryRules,
    TransportFailure,
    delivery_timeout_error,
    on_partition_response,
    on_transport_failure,
    transport_failure,
)
from client.records import TopicPartition
from minikafka.errors import ErrorCode

TP = TopicPartition("t", 0)
RULES = RetryRules(retries=None, retry_backoff_ms=100, delivery_timeout_ms=120_000)
NOW_MS = 1_000.0
FRESH = BatchState(tp=TP, record_count=3, created_ms=0.0, attempts=1, base_sequence=0)

Summary = tuple[str, bool | None, str | None]


def summary(outcome: Outcome) -> Summary:
    if isinstance(outcome, Complete):
        return ("complete", None, None)
    if isinstance(outcome, RefreshThenRetry):
        return ("refresh-then-retry", outcome.maybe_written, type(outcome.error).__name__)
    if isinstance(outcome, Retry):
        return ("retry", outcome.maybe_written, type(outcome.error).__name__)
    if isinstance(outcome, BumpEpochThenRetry):
        return ("bump-epoch", None, type(outcome.error).__name__)
    assert isinstance(outcome, Fail)
    return ("fail", outcome.indefinite, type(outcome.error).__name__)


def answer(code: ErrorCode, *, indefinite: bool = False) -> PartitionAnswer:
    return PartitionAnswer(
        error_code=int(code),
        error_message="",
        base_offset=40 if code in (ErrorCode.NONE, ErrorCode.DUPLICATE_SEQUENCE_NUMBER) else -1,
        log_start_offset=2,
        indefinite=indefinite,
    )


# ---- every code, a fresh batch (first attempt, no flags, no limits) ----------------------

C, R, RR, F = "complete", "retry", "refresh-then-retry", "fail"

#: code -> (kind, maybe_written / indefinite). Written out, not derived from the code
#: sets the policy uses, so that a change to those sets shows up here.
EVERY_CODE: dict[ErrorCode, tuple[str, bool | None]] = {
    ErrorCode.NONE: (C, None),
    ErrorCode.UNKNOWN_SERVER_ERROR: (F, False),
    ErrorCode.OFFSET_OUT_OF_RANGE: (F, False),
    ErrorCode.CORRUPT_MESSAGE: (R, False),
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: (RR, False),
    ErrorCode.INVALID_FETCH_SIZE: (F, False),
    ErrorCode.LEADER_NOT_AVAILABLE: (RR, False),
    ErrorCode.NOT_LEADER_OR_FOLLOWER: (RR, False),
    ErrorCode.REQUEST_TIMED_OUT: (RR, True),
    ErrorCode.BROKER_NOT_AVAILABLE: (RR, False),
    ErrorCode.REPLICA_NOT_AVAILABLE: (RR, False),
    ErrorCode.MESSAGE_TOO_LARGE: (F, False),
    ErrorCode.STALE_CONTROLLER_EPOCH: (F, False),
    ErrorCode.NETWORK_EXCEPTION: (RR, False),
    ErrorCode.INVALID_TOPIC_EXCEPTION: (F, False),
    ErrorCode.RECORD_LIST_TOO_LARGE: (F, False),
    ErrorCode.NOT_ENOUGH_REPLICAS: (RR, False),
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: (RR, True),
    ErrorCode.INVALID_REQUIRED_ACKS: (F, False),
    ErrorCode.TOPIC_AUTHORIZATION_FAILED: (F, False),
    ErrorCode.GROUP_AUTHORIZATION_FAILED: (F, False),
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED: (F, False),
    ErrorCode.INVALID_TIMESTAMP: (F, False),
    ErrorCode.UNSUPPORTED_VERSION: (F, False),
    ErrorCode.TOPIC_ALREADY_EXISTS: (F, False),
    ErrorCode.INVALID_PARTITIONS: (F, False),
    ErrorCode.INVALID_REPLICATION_FACTOR: (F, False),
    ErrorCode.INVALID_REPLICA_ASSIGNMENT: (F, False),
    ErrorCode.INVALID_CONFIG: (F, False),
    ErrorCode.NOT_CONTROLLER: (RR, False),
    ErrorCode.INVALID_REQUEST: (F, False),
    ErrorCode.POLICY_VIOLATION: (F, False),
    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER: (F, False),
    ErrorCode.DUPLICATE_SEQUENCE_NUMBER: (C, None),
    ErrorCode.INVALID_PRODUCER_EPOCH: (F, False),
    ErrorCode.KAFKA_STORAGE_ERROR: (RR, False),
    ErrorCode.UNKNOWN_PRODUCER_ID: (F, False),
    ErrorCode.FENCED_LEADER_EPOCH: (RR, False),
    ErrorCode.UNKNOWN_LEADER_EPOCH: (RR, False),
    ErrorCode.UNSUPPORTED_COMPRESSION_TYPE: (F, False),
    ErrorCode.STALE_BROKER_EPOCH: (F, False),
    ErrorCode.OFFSET_NOT_AVAILABLE: (R, False),
    ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE: (R, False),
    ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE: (R, False),
    ErrorCode.ELECTION_NOT_NEEDED: (F, False),
    ErrorCode.INVALID_RECORD: (F, False),
    ErrorCode.INVALID_UPDATE_VERSION: (F, False),
    ErrorCode.DUPLICATE_BROKER_REGISTRATION: (F, False),
    ErrorCode.BROKER_ID_NOT_REGISTERED: (F, False),
    ErrorCode.INELIGIBLE_REPLICA: (F, False),
    # Group coordinator codes: never a produce answer; retriable ones are retried.
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: (R, False),
    ErrorCode.COORDINATOR_NOT_AVAILABLE: (R, False),
    ErrorCode.NOT_COORDINATOR: (R, False),
    ErrorCode.INVALID_GROUP_ID: (F, False),
    ErrorCode.UNKNOWN_MEMBER_ID: (F, False),
    ErrorCode.INVALID_SESSION_TIMEOUT: (F, False),
    ErrorCode.NON_EMPTY_GROUP: (F, False),
    ErrorCode.GROUP_ID_NOT_FOUND: (F, False),
    ErrorCode.GROUP_MAX_SIZE_REACHED: (F, False),
    ErrorCode.FENCED_MEMBER_EPOCH: (F, False),
    ErrorCode.UNRELEASED_INSTANCE_ID: (F, False),
    ErrorCode.UNSUPPORTED_ASSIGNOR: (F, False),
    ErrorCode.STALE_MEMBER_EPOCH: (F, False),
}


def test_the_table_has_every_code() -> None:
    assert set(EVERY_CODE) == set(ErrorCode)


@pytest.mark.parametrize("code", list(EVERY_CODE), ids=[c.name for c in EVERY_CODE])
def test_every_code_for_a_fresh_batch(code: ErrorCode) -> None:
    kind, flag = EVERY_CODE[code]
    outcome = on_partition_response(FRESH, answer(code), NOW_MS, RULES)
    got = summary(outcome)
    assert (got[0], got[1]) == (kind, flag)
    if isinstance(outcome, Complete):
        assert (outcome.base_offset, outcome.log_start_offset) == (40, 2)
    if isinstance(outcome, Retry):
        assert outcome.backoff
    if isinstance(outcome, Fail):
        assert getattr(outcome.error, "errno", None) == code


# ---- the state decides ------------------------------------------------------------------

NL, TO, NER = (
    ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.REQUEST_TIMED_OUT,
    ErrorCode.NOT_ENOUGH_REPLICAS,
)
OOO = ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
LIMITED = RetryRules(retries=0, retry_backoff_ms=100, delivery_timeout_ms=120_000)
WAS_MAYBE_WRITTEN = BatchState(
    tp=TP, record_count=3, created_ms=0.0, attempts=2, base_sequence=0, maybe_written=True,
    indefinite=True,
)  # fmt: skip
WAS_INDEFINITE = BatchState(
    tp=TP, record_count=3, created_ms=0.0, attempts=2, base_sequence=0, indefinite=True
)


@pytest.mark.parametrize(
    ("batch", "code", "indefinite_answer", "rules", "now_ms", "closed", "bump", "earlier",
     "expected"),
    [
        pytest.param(FRESH, NL, True, RULES, NOW_MS, False, False, False,
                     (RR, True, "NotLeaderOrFollowerError"), id="not-leader-after-append"),
        pytest.param(FRESH, NL, True, LIMITED, NOW_MS, False, False, False,
                     (F, True, "NotLeaderOrFollowerError"), id="not-leader-after-append-no-retry"),
        pytest.param(FRESH, NL, False, LIMITED, NOW_MS, False, False, False,
                     (F, False, "NotLeaderOrFollowerError"), id="not-leader-refused-no-retry"),
        pytest.param(FRESH, TO, False, LIMITED, NOW_MS, False, False, False,
                     (F, True, "RequestTimedOutError"), id="timed-out-no-retry"),
        pytest.param(FRESH, NER, False, LIMITED, NOW_MS, False, False, False,
                     (F, False, "NotEnoughReplicasError"), id="below-min-isr-no-retry"),
        pytest.param(WAS_INDEFINITE, NER, False, LIMITED, NOW_MS, False, False, False,
                     (F, True, "NotEnoughReplicasError"), id="earlier-attempt-maybe-written"),
        pytest.param(FRESH, ErrorCode.MESSAGE_TOO_LARGE, True, RULES, NOW_MS, False, False, False,
                     (F, True, "MessageSizeTooLargeError"), id="definite-code-said-indefinite"),
        pytest.param(FRESH, NER, False, RULES, 119_901.0, False, False, False,
                     (F, False, "KafkaTimeoutError"), id="retry-after-delivery-timeout"),
        pytest.param(FRESH, NER, False, RULES, 119_900.0, False, False, False,
                     (RR, False, "NotEnoughReplicasError"), id="retry-just-in-time"),
        pytest.param(FRESH, NER, False, RULES, NOW_MS, True, False, False,
                     (F, False, "NotEnoughReplicasError"), id="closed-no-retry"),
        pytest.param(FRESH, OOO, False, RULES, NOW_MS, False, False, True,
                     (R, False, "OutOfOrderSequenceNumberError"), id="ooo-earlier-on-its-way"),
        pytest.param(FRESH, OOO, False, RULES, NOW_MS, False, True, False,
                     ("bump-epoch", None, "OutOfOrderSequenceNumberError"),
                     id="ooo-behind-a-hole-waits-for-new-epoch"),
        pytest.param(WAS_MAYBE_WRITTEN, OOO, False, RULES, NOW_MS, False, True, False,
                     (F, True, "OutOfOrderSequenceNumberError"),
                     id="ooo-maybe-written-never-resequenced"),
        pytest.param(FRESH, OOO, False, RULES, NOW_MS, False, True, True,
                     (R, False, "OutOfOrderSequenceNumberError"), id="ooo-earlier-wins-over-bump"),
        pytest.param(WAS_MAYBE_WRITTEN, ErrorCode.DUPLICATE_SEQUENCE_NUMBER, False, RULES, NOW_MS,
                     False, True, False, (C, None, None), id="resent-and-already-written"),
    ],
)  # fmt: skip
def test_the_state_decides(
    batch: BatchState,
    code: ErrorCode,
    indefinite_answer: bool,
    rules: RetryRules,
    now_ms: float,
    closed: bool,
    bump: bool,
    earlier: bool,
    expected: Summary,
) -> None:
    outcome = on_partition_response(
        batch,
        answer(code, indefinite=indefinite_answer),
        now_ms,
        rules,
        closed=closed,
        epoch_bump_pending=bump,
        earlier_pending=lambda: earlier,
    )
    assert summary(outcome) == expected


def test_earlier_pending_is_asked_only_for_out_of_order() -> None:
    def never() -> bool:
        raise AssertionError("asked")

    on_partition_response(FRESH, answer(NL), NOW_MS, RULES, earlier_pending=never)


def test_the_delivery_timeout_error_names_the_cause() -> None:
    outcome = on_partition_response(FRESH, answer(NER), 119_901.0, RULES)
    assert isinstance(outcome, Fail)
    assert isinstance(outcome.error, KafkaTimeoutError)
    assert "3 record(s) not delivered within delivery_timeout_ms=120000" in str(outcome.error)
    assert "NOT_ENOUGH_REPLICAS" in str(outcome.error)


@pytest.mark.parametrize(
    ("last_error", "now_error", "expected"),
    [
        (None, None, "never sent (no leader known for the partition?)"),
        ("A", None, "last error: A"),
        (None, "B", "last error: B"),
        ("A", "A", "last error: A"),
        ("A", "B", "last error: B; before that: A"),
    ],
    ids=["never-sent", "expired-while-waiting-to-retry", "first-attempt", "same", "both"],
)
def test_delivery_timeout_messages(
    last_error: str | None, now_error: str | None, expected: str
) -> None:
    batch = BatchState(tp=TP, record_count=1, created_ms=0.0, attempts=1, last_error=last_error)
    assert str(delivery_timeout_error(batch, RULES, last_error=now_error)).endswith(expected)


# ---- calls that failed without an answer ------------------------------------------------


@pytest.mark.parametrize(
    ("batch", "failure", "rules", "expected", "backoff"),
    [
        pytest.param(FRESH, TransportFailure.LEADER_MOVED, RULES,
                     (R, True, "KafkaConnectionError"), False, id="leader-moved-resend-at-once"),
        pytest.param(FRESH, TransportFailure.CONNECTION, RULES,
                     (RR, True, "KafkaConnectionError"), True, id="connection-lost"),
        pytest.param(FRESH, TransportFailure.DEADLINE, RULES,
                     (RR, True, "KafkaConnectionError"), True, id="deadline"),
        pytest.param(FRESH, TransportFailure.CONNECTION, LIMITED,
                     (F, True, "KafkaConnectionError"), None, id="connection-lost-no-retry"),
        pytest.param(FRESH, TransportFailure.REFUSED, RULES,
                     (F, False, "IllegalStateError"), None, id="refused-before-processing"),
        pytest.param(WAS_INDEFINITE, TransportFailure.REFUSED, RULES,
                     (F, True, "IllegalStateError"), None, id="refused-after-maybe-written"),
        pytest.param(FRESH, TransportFailure.DENIED, RULES,
                     (F, False, "ClusterAuthorizationFailedError"), None, id="denied-by-acls"),
        pytest.param(FRESH, TransportFailure.OTHER, RULES,
                     (F, True, "IllegalStateError"), None, id="other-grpc-failure"),
        pytest.param(FRESH, TransportFailure.NOT_ANSWERED, RULES,
                     (F, True, "IllegalStateError"), None, id="partition-not-answered"),
        pytest.param(FRESH, TransportFailure.LEADER_GONE, RULES,
                     (R, False, "KafkaConnectionError"), True, id="leader-left-before-sending"),
    ],
)  # fmt: skip
def test_transport_failures(
    batch: BatchState,
    failure: TransportFailure,
    rules: RetryRules,
    expected: Summary,
    backoff: bool | None,
) -> None:
    outcome = on_transport_failure(batch, failure, "broker 1: boom", NOW_MS, rules)
    assert summary(outcome) == expected
    if isinstance(outcome, Retry):
        assert outcome.backoff is backoff


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (grpc.StatusCode.DEADLINE_EXCEEDED, TransportFailure.DEADLINE),
        (grpc.StatusCode.UNAVAILABLE, TransportFailure.CONNECTION),
        (grpc.StatusCode.CANCELLED, TransportFailure.CONNECTION),
        (grpc.StatusCode.UNKNOWN, TransportFailure.CONNECTION),
        (grpc.StatusCode.INVALID_ARGUMENT, TransportFailure.REFUSED),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, TransportFailure.REFUSED),
        (grpc.StatusCode.UNIMPLEMENTED, TransportFailure.REFUSED),
        (grpc.StatusCode.PERMISSION_DENIED, TransportFailure.DENIED),
        (grpc.StatusCode.UNAUTHENTICATED, TransportFailure.REFUSED),
        (grpc.StatusCode.INTERNAL, TransportFailure.OTHER),
        (grpc.StatusCode.DATA_LOSS, TransportFailure.OTHER),
    ],
    ids=lambda value: getattr(value, "name", str(value)),
)
def test_grpc_status_classes(code: grpc.StatusCode, expected: TransportFailure) -> None:
    assert transport_failure(code) is expected


def test_errors_name_the_partition() -> None:
    outcome = on_partition_response(FRESH, answer(OOO), NOW_MS, RULES)
    assert isinstance(outcome, Fail)
    assert isinstance(outcome.error, OutOfOrderSequenceNumberError)
    assert str(outcome.error).startswith("Produce t-0:")
    moved = on_transport_failure(FRESH, TransportFailure.LEADER_MOVED, "gone", NOW_MS, RULES)
    assert isinstance(moved, Retry)
    assert isinstance(moved.error, KafkaConnectionError)
    refused = on_transport_failure(FRESH, TransportFailure.REFUSED, "no", NOW_MS, RULES)
    assert isinstance(refused, Fail)
    assert isinstance(refused.error, IllegalStateError)
