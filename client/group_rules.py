"""PURE rules of a consumer-group member (client side, KIP-848).

- `heartbeat_action`: what a ConsumerGroupHeartbeat error means. Fenced (its epoch is not
  the member's) or forgotten (session expired): the member has lost its partitions, tells
  the listener `on_partitions_lost` and joins again with epoch 0. The coordinator moved or
  is not elected: find it again. Loading or a timeout: ask the same one again. Anything else
  is a configuration or programming error: raised.
- `commit_action`: the same for OffsetCommit and OffsetFetch, where a fencing answer is
  `CommitFailedError` (commit) or raised (fetch): **never** read as "no committed offset".
  A stale epoch (the coordinator gave the member a newer epoch its heartbeat has not
  brought yet) is sent again with the next epoch, as Kafka's consumer does.
- `assignment_change`: given what the member owns and the assignment an answer carries,
  what to revoke (give up first: commit, listener) and what to add (after looking up its
  committed offset).
"""

from __future__ import annotations

import enum
from collections.abc import Set

from client.records import TopicPartition
from minikafka.errors import ErrorCode


class GroupAction(enum.Enum):
    OK = "ok"
    REJOIN = "rejoin"  # heartbeat: partitions lost, join with epoch 0
    FENCED = "fenced"  # commit / offset fetch: CommitFailedError or raised
    AWAIT_EPOCH = "await-epoch"  # commit / offset fetch: again with the next member epoch
    FIND_COORDINATOR = "find-coordinator"
    RETRY = "retry"  # same coordinator, after the back-off
    FAIL = "fail"  # raised to the application


_FIND_COORDINATOR = frozenset(
    {
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.BROKER_NOT_AVAILABLE,
    }
)
_RETRY = frozenset(
    {
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    }
)
_FENCED = frozenset({ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID})


def _action(code: ErrorCode, fenced: GroupAction, stale: GroupAction) -> GroupAction:
    if code is ErrorCode.NONE:
        return GroupAction.OK
    if code in _FENCED:
        return fenced
    if code is ErrorCode.STALE_MEMBER_EPOCH:
        return stale
    if code in _FIND_COORDINATOR:
        return GroupAction.FIND_COORDINATOR
    if code in _RETRY:
        return GroupAction.RETRY
    return GroupAction.FAIL


def heartbeat_action(code: ErrorCode) -> GroupAction:
    return _action(code, GroupAction.REJOIN, GroupAction.REJOIN)


def commit_action(code: ErrorCode) -> GroupAction:
    return _action(code, GroupAction.FENCED, GroupAction.AWAIT_EPOCH)


def assignment_change(
    owned: Set[TopicPartition], assigned: Set[TopicPartition]
) -> tuple[frozenset[TopicPartition], frozenset[TopicPartition]]:
    """(to revoke, to add)."""
    return frozenset(owned - assigned), frozenset(assigned - owned)
