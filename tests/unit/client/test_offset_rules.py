"""The consumer's PURE rules: reset targets, what every fetch error code means, and the
partition state machine of `client.subscription`."""

from __future__ import annotations

import pytest

from client.errors import IllegalStateError, OffsetOutOfRangeError
from client.offset_rules import (
    EARLIEST,
    LATEST,
    FetchErrorKind,
    OffsetReset,
    on_fetch_error,
    reset_target,
)
from client.records import TopicPartition
from client.subscription import FetchStatus, PartitionState, SubscriptionState
from minikafka.errors import ErrorCode

TP = TopicPartition("t", 0)


@pytest.mark.parametrize(
    ("policy", "expected"),
    [("earliest", EARLIEST), ("latest", LATEST), ("none", None)],
    ids=["earliest", "latest", "none"],
)
def test_reset_target(policy: OffsetReset, expected: int | None) -> None:
    assert reset_target(policy) == expected


RL, RS, FL, RP = (
    FetchErrorKind.RETRY_LATER,
    FetchErrorKind.RESET,
    FetchErrorKind.FAIL,
    FetchErrorKind.REPORT,
)

#: code -> (kind, refresh metadata first) with auto_offset_reset="latest". Written out
#: so that a change to the code sets the rule uses shows up here.
EVERY_CODE: dict[ErrorCode, tuple[FetchErrorKind, bool]] = {
    ErrorCode.UNKNOWN_SERVER_ERROR: (RP, False),
    ErrorCode.OFFSET_OUT_OF_RANGE: (RS, False),
    ErrorCode.CORRUPT_MESSAGE: (RL, False),
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: (RL, True),
    ErrorCode.INVALID_FETCH_SIZE: (RP, False),
    ErrorCode.LEADER_NOT_AVAILABLE: (RL, True),
    ErrorCode.NOT_LEADER_OR_FOLLOWER: (RL, True),
    ErrorCode.REQUEST_TIMED_OUT: (RL, False),
    ErrorCode.BROKER_NOT_AVAILABLE: (RL, True),
    ErrorCode.REPLICA_NOT_AVAILABLE: (RL, True),
    ErrorCode.MESSAGE_TOO_LARGE: (RP, False),
    ErrorCode.STALE_CONTROLLER_EPOCH: (RP, False),
    ErrorCode.NETWORK_EXCEPTION: (RL, True),
    ErrorCode.INVALID_TOPIC_EXCEPTION: (RP, False),
    ErrorCode.RECORD_LIST_TOO_LARGE: (RP, False),
    ErrorCode.NOT_ENOUGH_REPLICAS: (RL, False),
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: (RL, False),
    ErrorCode.INVALID_REQUIRED_ACKS: (RP, False),
    ErrorCode.TOPIC_AUTHORIZATION_FAILED: (RP, False),
    ErrorCode.GROUP_AUTHORIZATION_FAILED: (RP, False),
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED: (RP, False),
    ErrorCode.INVALID_TIMESTAMP: (RP, False),
    ErrorCode.UNSUPPORTED_VERSION: (RP, False),
    ErrorCode.TOPIC_ALREADY_EXISTS: (RP, False),
    ErrorCode.INVALID_PARTITIONS: (RP, False),
    ErrorCode.INVALID_REPLICATION_FACTOR: (RP, False),
    ErrorCode.INVALID_REPLICA_ASSIGNMENT: (RP, False),
    ErrorCode.INVALID_CONFIG: (RP, False),
    ErrorCode.NOT_CONTROLLER: (RL, True),
    ErrorCode.INVALID_REQUEST: (RP, False),
    ErrorCode.POLICY_VIOLATION: (RP, False),
    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER: (RP, False),
    ErrorCode.DUPLICATE_SEQUENCE_NUMBER: (RP, False),
    ErrorCode.INVALID_PRODUCER_EPOCH: (RP, False),
    ErrorCode.KAFKA_STORAGE_ERROR: (RL, True),
    ErrorCode.UNKNOWN_PRODUCER_ID: (RP, False),
    ErrorCode.FENCED_LEADER_EPOCH: (RL, True),
    ErrorCode.UNKNOWN_LEADER_EPOCH: (RL, True),
    ErrorCode.UNSUPPORTED_COMPRESSION_TYPE: (RP, False),
    ErrorCode.STALE_BROKER_EPOCH: (RP, False),
    ErrorCode.OFFSET_NOT_AVAILABLE: (RL, False),
    ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE: (RL, False),
    ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE: (RL, False),
    ErrorCode.ELECTION_NOT_NEEDED: (RP, False),
    ErrorCode.INVALID_RECORD: (RP, False),
    ErrorCode.INVALID_UPDATE_VERSION: (RP, False),
    ErrorCode.DUPLICATE_BROKER_REGISTRATION: (RP, False),
    ErrorCode.BROKER_ID_NOT_REGISTERED: (RP, False),
    ErrorCode.INELIGIBLE_REPLICA: (RP, False),
    # Group coordinator codes: never a fetch answer, but retriable where they occur.
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: (RL, False),
    ErrorCode.COORDINATOR_NOT_AVAILABLE: (RL, False),
    ErrorCode.NOT_COORDINATOR: (RL, False),
    ErrorCode.INVALID_GROUP_ID: (RP, False),
    ErrorCode.UNKNOWN_MEMBER_ID: (RP, False),
    ErrorCode.INVALID_SESSION_TIMEOUT: (RP, False),
    ErrorCode.NON_EMPTY_GROUP: (RP, False),
    ErrorCode.GROUP_ID_NOT_FOUND: (RP, False),
    ErrorCode.GROUP_MAX_SIZE_REACHED: (RP, False),
    ErrorCode.FENCED_MEMBER_EPOCH: (RP, False),
    ErrorCode.UNRELEASED_INSTANCE_ID: (RP, False),
    ErrorCode.UNSUPPORTED_ASSIGNOR: (RP, False),
    ErrorCode.STALE_MEMBER_EPOCH: (RP, False),
}


def test_the_table_has_every_error_code() -> None:
    assert set(EVERY_CODE) == set(ErrorCode) - {ErrorCode.NONE}


@pytest.mark.parametrize("code", list(EVERY_CODE), ids=[c.name for c in EVERY_CODE])
def test_every_fetch_error_code(code: ErrorCode) -> None:
    kind, refresh = EVERY_CODE[code]
    outcome = on_fetch_error(code, "msg", tp=TP, position=42, auto_offset_reset="latest")
    assert (outcome.kind, outcome.refresh_metadata) == (kind, refresh)
    if kind is RS:
        assert outcome.reset_to == LATEST
    if kind is RP:
        assert outcome.error is not None
        assert outcome.error.errno == code
        assert "fetch t-0" in str(outcome.error)


@pytest.mark.parametrize(
    ("policy", "kind", "reset_to"),
    [("earliest", RS, EARLIEST), ("latest", RS, LATEST), ("none", FL, None)],
    ids=["earliest", "latest", "none-fails"],
)
def test_out_of_range_follows_auto_offset_reset(
    policy: OffsetReset, kind: FetchErrorKind, reset_to: int | None
) -> None:
    outcome = on_fetch_error(
        ErrorCode.OFFSET_OUT_OF_RANGE, "gone", tp=TP, position=42, auto_offset_reset=policy
    )
    assert (outcome.kind, outcome.reset_to) == (kind, reset_to)
    if kind is FL:
        assert isinstance(outcome.error, OffsetOutOfRangeError)
        assert "offset 42 is out of range and auto_offset_reset='none'" in str(outcome.error)


# ---- the partition state machine ------------------------------------------------------


def test_a_new_partition_starts_per_the_reset_policy() -> None:
    assert PartitionState(EARLIEST).status is FetchStatus.AWAITING_RESET
    assert PartitionState(None).status is FetchStatus.NO_POSITION


@pytest.mark.parametrize(
    ("start", "step", "expected"),
    [
        (FetchStatus.AWAITING_RESET, "seek", FetchStatus.FETCHING),
        (FetchStatus.NO_POSITION, "seek", FetchStatus.FETCHING),
        (FetchStatus.FETCHING, "reset", FetchStatus.AWAITING_RESET),
        (FetchStatus.FETCHING, "fail", FetchStatus.FAILED),
        (FetchStatus.FAILED, "seek", FetchStatus.FETCHING),
        (FetchStatus.FAILED, "reset", FetchStatus.AWAITING_RESET),
    ],
    ids=[
        "reset-done",
        "no-position-sought",
        "out-of-range",
        "stopped-at-error",
        "seek-past-error",
        "reset-from-failed",
    ],
)
def test_transitions(start: FetchStatus, step: str, expected: FetchStatus) -> None:
    state = PartitionState(EARLIEST if start is FetchStatus.AWAITING_RESET else None)
    if start is FetchStatus.FETCHING:
        state.seek(5, -1)
    if start is FetchStatus.FAILED:
        state.seek(5, -1)
        state.fail(OffsetOutOfRangeError("x"), 5)
    generation = state.generation
    if step == "seek":
        state.seek(10, 2)
        assert (state.position(), state.fetch_epoch, state.error) == (10, 2, None)
    elif step == "reset":
        state.await_reset(LATEST)
        assert state.reset_to == LATEST
    else:
        state.fail(OffsetOutOfRangeError("x"), 5)
    assert state.status is expected
    assert state.generation == generation + (0 if step == "fail" else 1)


@pytest.mark.parametrize(
    ("setup", "fetchable"),
    [
        ({}, True),
        ({"paused": True}, False),
        ({"in_flight": True}, False),
        ({"retry_after": 11.0}, False),
        ({"buffered": 2}, False),
        ({"buffered": 1}, True),
        ({"error": True}, False),
        ({"awaiting_reset": True}, False),
    ],
    ids=[
        "fetching",
        "paused",
        "in-flight",
        "backing-off",
        "buffer-full",
        "buffer-has-room",
        "error-to-report",
        "awaiting-reset",
    ],
)
def test_fetchable(setup: dict[str, object], fetchable: bool) -> None:
    state = PartitionState(None)
    state.seek(0, -1)
    state.paused = bool(setup.get("paused"))
    state.in_flight = bool(setup.get("in_flight"))
    state.retry_after = float(setup.get("retry_after", 0.0))  # type: ignore[arg-type]
    state.raw = [(b"", 0)] * int(setup.get("buffered", 0))  # type: ignore[call-overload]
    if setup.get("error"):
        state.error = ValueError("once")
    if setup.get("awaiting_reset"):
        state.await_reset(EARLIEST)
    assert state.fetchable(10.0, max_buffered=2) is fetchable


def test_subscribe_and_assign_exclude_each_other_and_pause_needs_assignment() -> None:
    subscription = SubscriptionState(["a"], EARLIEST)
    with pytest.raises(IllegalStateError, match="mutually exclusive"):
        subscription.assign_partitions([TP])
    subscription.unsubscribe()
    assert subscription.assign_partitions([TP]) == {TP}
    with pytest.raises(IllegalStateError, match="mutually exclusive"):
        subscription.subscribe_to("a")
    with pytest.raises(IllegalStateError, match="t-1 is not assigned"):
        subscription.pause([TP, TopicPartition("t", 1)])
    assert subscription.paused() == set()  # all or nothing
    subscription.pause([TP])
    assert subscription.paused() == {TP}
    subscription.resume([TP])
    assert subscription.paused() == set()
