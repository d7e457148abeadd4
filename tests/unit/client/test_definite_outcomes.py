"""Which produce failures the fault suite may count as definite (`classify`)."""

from __future__ import annotations

import pytest

from client.errors import (
    KafkaConnectionError,
    KafkaTimeoutError,
    MessageSizeTooLargeError,
    MiniKafkaClientError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    RequestTimedOutError,
)
from tests.chaos.workload import classify


def failed(error: MiniKafkaClientError, *, indefinite: bool) -> MiniKafkaClientError:
    error.indefinite = indefinite
    return error


@pytest.mark.parametrize(
    ("error", "single_attempt", "expected"),
    [
        (failed(NotLeaderOrFollowerError(), indefinite=False), True, "fail"),
        (failed(NotLeaderOrFollowerError(), indefinite=True), True, "info"),
        (failed(NotLeaderOrFollowerError(), indefinite=False), False, "info"),
        (failed(NotEnoughReplicasError(), indefinite=False), True, "fail"),
        (failed(MessageSizeTooLargeError(), indefinite=False), True, "fail"),
        (failed(RequestTimedOutError(), indefinite=True), True, "info"),
        (failed(KafkaTimeoutError(), indefinite=False), True, "info"),
        (failed(KafkaConnectionError(), indefinite=True), True, "info"),
        (ValueError("not a client error"), True, "info"),
    ],
    ids=[
        "refused-before-append",
        "not-leader-after-append",
        "retried-so-unknown",
        "below-min-isr-before-append",
        "too-large",
        "timed-out",
        "client-timeout",
        "connection-lost",
        "foreign-exception",
    ],
)
def test_classify(error: BaseException, single_attempt: bool, expected: str) -> None:
    assert classify(error, single_attempt=single_attempt) == expected


def test_errors_are_definite_unless_marked() -> None:
    assert NotLeaderOrFollowerError().indefinite is False
