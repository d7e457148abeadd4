"""Client-side group rules: what each heartbeat and commit answer means, and how an
assignment answer splits into revocations and additions."""

from __future__ import annotations

import pytest

from client.group_rules import GroupAction, assignment_change, commit_action, heartbeat_action
from client.records import TopicPartition
from minikafka.errors import ErrorCode

E, A = ErrorCode, GroupAction

# (code) -> (heartbeat action, commit action)
CASES = [
    ("success", E.NONE, A.OK, A.OK),
    ("fenced epoch: rejoin / commit failed", E.FENCED_MEMBER_EPOCH, A.REJOIN, A.FENCED),
    ("session expired: rejoin / commit failed", E.UNKNOWN_MEMBER_ID, A.REJOIN, A.FENCED),
    ("stale epoch: again with the next epoch", E.STALE_MEMBER_EPOCH, A.REJOIN, A.AWAIT_EPOCH),
    ("coordinator moved", E.NOT_COORDINATOR, A.FIND_COORDINATOR, A.FIND_COORDINATOR),
    ("no coordinator yet", E.COORDINATOR_NOT_AVAILABLE, A.FIND_COORDINATOR, A.FIND_COORDINATOR),
    ("connection lost", E.NETWORK_EXCEPTION, A.FIND_COORDINATOR, A.FIND_COORDINATOR),
    ("coordinator loading", E.COORDINATOR_LOAD_IN_PROGRESS, A.RETRY, A.RETRY),
    ("commit not replicated in time", E.REQUEST_TIMED_OUT, A.RETRY, A.RETRY),
    ("offsets partition below min ISR", E.NOT_ENOUGH_REPLICAS, A.RETRY, A.RETRY),
    ("unknown assignor is a configuration error", E.UNSUPPORTED_ASSIGNOR, A.FAIL, A.FAIL),
    ("instance id in use", E.UNRELEASED_INSTANCE_ID, A.FAIL, A.FAIL),
    ("group full", E.GROUP_MAX_SIZE_REACHED, A.FAIL, A.FAIL),
    ("bad session timeout", E.INVALID_SESSION_TIMEOUT, A.FAIL, A.FAIL),
    ("bad group id", E.INVALID_GROUP_ID, A.FAIL, A.FAIL),
]


@pytest.mark.parametrize(
    ("code", "on_heartbeat", "on_commit"), [pytest.param(*r[1:], id=r[0]) for r in CASES]
)
def test_group_actions(code: ErrorCode, on_heartbeat: GroupAction, on_commit: GroupAction) -> None:
    assert heartbeat_action(code) is on_heartbeat
    assert commit_action(code) is on_commit


T = [TopicPartition("t", p) for p in range(4)]
CHANGES = [
    ("first assignment", set(), {T[0], T[1]}, set(), {T[0], T[1]}),
    ("unchanged", {T[0]}, {T[0]}, set(), set()),
    ("shrinks", {T[0], T[1]}, {T[0]}, {T[1]}, set()),
    ("moves", {T[0], T[1]}, {T[1], T[2]}, {T[0]}, {T[2]}),
    ("everything revoked", {T[0], T[3]}, set(), {T[0], T[3]}, set()),
]


@pytest.mark.parametrize(
    ("owned", "assigned", "revoke", "add"), [pytest.param(*r[1:], id=r[0]) for r in CHANGES]
)
def test_assignment_change(
    owned: set[TopicPartition],
    assigned: set[TopicPartition],
    revoke: set[TopicPartition],
    add: set[TopicPartition],
) -> None:
    assert assignment_change(owned, assigned) == (frozenset(revoke), frozenset(add))
