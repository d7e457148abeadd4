"""PURE consumer rules: where a partition's position goes when it is missing, out of
range or truncated, and what a fetch answer's error means. No I/O, no clock.

- `reset_target(auto_offset_reset)`: EARLIEST / LATEST, or None ("none": no reset).
- `on_fetch_error(code, ...)`: RETRY_LATER (optionally after a metadata refresh), RESET
  to the `auto_offset_reset` position, FAIL the partition with an error (until a seek),
  or REPORT an error once and fetch again later.
- `truncation_action(...)`: the reaction to a diverging epoch (KIP-320).
- `missing_partition_error(...)`: why offsets could not be looked up before a deadline.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import Final, Literal

import msgspec

from client.errors import (
    LeaderNotAvailableError,
    MiniKafkaClientError,
    OffsetOutOfRangeError,
    UnknownTopicOrPartitionError,
    from_response,
)
from client.metadata import ClusterView
from client.records import TopicPartition
from minikafka.errors import INVALID_METADATA_CODES, RETRIABLE_CODES, ErrorCode

OffsetReset = Literal["earliest", "latest", "none"]
#: ListOffsets timestamps: the log start offset, and the high watermark.
EARLIEST: Final = -2
LATEST: Final = -1


def reset_target(auto_offset_reset: OffsetReset) -> int | None:
    """Where a partition without a valid position goes (None: nowhere, it fails)."""
    if auto_offset_reset == "earliest":
        return EARLIEST
    if auto_offset_reset == "latest":
        return LATEST
    return None


class FetchErrorKind(enum.Enum):
    #: Fetch the partition again after `retry_backoff_ms`.
    RETRY_LATER = "retry-later"
    #: Look its position up again (`FetchErrorOutcome.reset_to`).
    RESET = "reset"
    #: Stop at it with `FetchErrorOutcome.error` (until the user seeks).
    FAIL = "fail"
    #: Raise `FetchErrorOutcome.error` once, then fetch again after `retry_backoff_ms`.
    REPORT = "report"


class FetchErrorOutcome(msgspec.Struct, frozen=True, kw_only=True):
    kind: FetchErrorKind
    #: RETRY_LATER: refresh metadata first (the leader may have moved).
    refresh_metadata: bool = False
    #: RESET: EARLIEST or LATEST.
    reset_to: int | None = None
    #: FAIL: the error the consumer raises.
    error: MiniKafkaClientError | None = None


def on_fetch_error(
    code: int,
    message: str,
    *,
    tp: TopicPartition,
    position: int,
    auto_offset_reset: OffsetReset,
) -> FetchErrorOutcome:
    """What a fetch answer's (non-zero) error code means for the partition at `position`."""
    if code == ErrorCode.OFFSET_OUT_OF_RANGE:
        target = reset_target(auto_offset_reset)
        if target is None:
            return FetchErrorOutcome(
                kind=FetchErrorKind.FAIL,
                error=OffsetOutOfRangeError(
                    f"{tp.topic}-{tp.partition}: offset {position} is out of range and "
                    f"auto_offset_reset='none' ({message})"
                ),
            )
        return FetchErrorOutcome(kind=FetchErrorKind.RESET, reset_to=target)
    if code in INVALID_METADATA_CODES or code in RETRIABLE_CODES:
        return FetchErrorOutcome(
            kind=FetchErrorKind.RETRY_LATER, refresh_metadata=code in INVALID_METADATA_CODES
        )
    return FetchErrorOutcome(
        kind=FetchErrorKind.REPORT,
        error=from_response(code, message, context=f"fetch {tp.topic}-{tp.partition}"),
    )


class TruncationAction(msgspec.Struct, frozen=True, kw_only=True):
    """What to do when a fetch reports a diverging epoch."""

    kind: Literal["refetch", "reset", "raise"]
    offset: int
    epoch: int


def truncation_action(
    *,
    position: int,
    diverging_epoch: int,
    end_offset: int,
    reset_on_truncation: bool,
    auto_offset_reset: OffsetReset,
) -> TruncationAction:
    """Decide how to react to `diverging_epoch {epoch, end_offset}` (KIP-320).

    The leader's log matches what the consumer read up to `end_offset`. If the consumer
    has not handed out anything beyond that (`position <= end_offset`) it simply
    fetches again from its position under the leader's epoch. Otherwise records it
    delivered are gone: raise `LogTruncationError`, or, when the user asked for it,
    reset the position to `end_offset`.
    """
    if position <= end_offset:
        return TruncationAction(kind="refetch", offset=position, epoch=diverging_epoch)
    if reset_on_truncation and auto_offset_reset != "none":
        return TruncationAction(kind="reset", offset=end_offset, epoch=diverging_epoch)
    return TruncationAction(kind="raise", offset=end_offset, epoch=diverging_epoch)


def missing_partition_error(
    view: ClusterView, remaining: Iterable[TopicPartition], last_error: BaseException | None
) -> BaseException:
    """Why offsets of `remaining` could not be looked up before the deadline: the
    topic or partition does not exist, it has no leader, or the last error seen."""
    for tp in remaining:
        info = view.topics.get(tp.topic)
        if info is None or info.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            return UnknownTopicOrPartitionError(f"topic {tp.topic!r} does not exist")
        if info.partitions and tp.partition not in info.partitions:
            return UnknownTopicOrPartitionError(
                f"partition {tp.partition} of topic {tp.topic!r} does not exist (it has "
                f"partitions 0-{max(info.partitions)})"
            )
    if last_error is not None:
        return last_error
    names = ", ".join(f"{tp.topic}-{tp.partition}" for tp in remaining)
    return LeaderNotAvailableError(f"ListOffsets: no leader for {names}")
