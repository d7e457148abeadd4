"""Epoch-based log truncation (KIP-101, KIP-279, KIP-320, fetch-time divergence of KIP-595).

Pure functions over an epoch cache given as a sequence of `(epoch, start_offset)` pairs,
strictly increasing in both fields (the shell passes
`[(e.epoch, e.start_offset) for e in log.epoch_cache.entries()]`), and a log end offset.

Two sides of one conversation:

- Leader: `diverging_epoch_for_fetch` checks a replica fetch's `last_fetched_epoch` /
  `fetch_offset` against its own cache (Kafka `Partition.readRecords`). If the
  follower's log cannot be a prefix of the leader's, the answer is the largest leader
  epoch <= the follower's epoch and where it ends on the leader (KIP-279).
- Follower: `truncation_point` turns that answer into the offset to truncate to
  (Kafka `AbstractFetcherThread.getOffsetTruncationState`). When the follower does not
  know the leader's epoch it truncates to the end of its own largest epoch below it and
  fetches again with its new last epoch, until both sides agree.

The truncation point is never the follower's HW (KIP-101 scenario 1) and never above
the follower's LEO. It can be below the follower's HW only after an unclean election.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

import msgspec

from broker.replica.state import UNKNOWN
from minikafka.errors import ErrorCode, MiniKafkaError

#: One epoch cache entry: (leader epoch, offset of its first record).
EpochStart = tuple[int, int]


class EpochEndOffset(msgspec.Struct, frozen=True, kw_only=True):
    """An epoch and the offset where it ends (exclusive) on the answering replica's log."""

    epoch: int
    end_offset: int


class TruncationPoint(msgspec.Struct, frozen=True, kw_only=True):
    """Where the follower truncates; `complete` False means fetch again and re-check."""

    offset: int
    complete: bool


class FetchOffsetOutOfRange(MiniKafkaError):
    """The leader cannot place the fetch in its log (Kafka's OffsetOutOfRangeException)."""

    default_code = ErrorCode.OFFSET_OUT_OF_RANGE


def end_offset_for(
    entries: Sequence[EpochStart], requested_epoch: int, log_end_offset: int
) -> EpochEndOffset:
    """Kafka `LeaderEpochFileCache.endOffsetFor`, case for case.

    - `requested_epoch` is `UNKNOWN`: (UNKNOWN, UNKNOWN).
    - It is the latest epoch: (it, `log_end_offset`); the current epoch ends at the LEO.
    - No epoch above it (it is beyond the latest, or the cache is empty): (UNKNOWN, UNKNOWN).
    - No epoch at or below it: (requested, start of the first epoch); everything this
      replica holds is in later epochs.
    - Otherwise: (largest epoch <= requested, start offset of the next epoch).
    """
    if requested_epoch == UNKNOWN:
        return EpochEndOffset(epoch=UNKNOWN, end_offset=UNKNOWN)
    if entries and entries[-1][0] == requested_epoch:
        return EpochEndOffset(epoch=requested_epoch, end_offset=log_end_offset)
    epochs = [epoch for epoch, _ in entries]
    higher = bisect.bisect_right(epochs, requested_epoch)
    if higher == len(entries):
        return EpochEndOffset(epoch=UNKNOWN, end_offset=UNKNOWN)
    if higher == 0:
        return EpochEndOffset(epoch=requested_epoch, end_offset=entries[0][1])
    return EpochEndOffset(epoch=entries[higher - 1][0], end_offset=entries[higher][1])


def diverging_epoch_for_fetch(
    *,
    local_entries: Sequence[EpochStart],
    log_end_offset: int,
    log_start_offset: int,
    fetch_offset: int,
    last_fetched_epoch: int,
) -> EpochEndOffset | None:
    """Leader side: None if the fetch may proceed, else the diverging epoch to answer with.

    Kafka's Fetch v12+ validation: with `last_fetched_epoch` = `UNKNOWN` there is
    nothing to check. Otherwise look up `end_offset_for(last_fetched_epoch)` on the
    leader; the follower diverges when the leader's epoch is older than the follower's
    (the leader never had that epoch) or the epoch ends on the leader before
    `fetch_offset` (the follower has records the leader lacks).

    Raises `FetchOffsetOutOfRange` when the leader cannot determine the end of that epoch
    (it is newer than any epoch the leader has, or the leader's cache is empty) or when
    `fetch_offset` is below `log_start_offset`; the follower then resets against the
    leader's log start / end offsets.
    """
    if last_fetched_epoch == UNKNOWN:
        return None
    found = end_offset_for(local_entries, last_fetched_epoch, log_end_offset)
    if found.epoch == UNKNOWN or found.end_offset == UNKNOWN:
        raise FetchOffsetOutOfRange(
            f"cannot determine the end offset of last fetched epoch {last_fetched_epoch} "
            f"(latest local epoch {local_entries[-1][0] if local_entries else None})"
        )
    if fetch_offset < log_start_offset:
        raise FetchOffsetOutOfRange(
            f"fetch offset {fetch_offset} is below the log start offset {log_start_offset}"
        )
    if found.epoch < last_fetched_epoch or found.end_offset < fetch_offset:
        return found
    return None


def truncation_point(
    *, local_entries: Sequence[EpochStart], log_end_offset: int, diverging: EpochEndOffset
) -> TruncationPoint:
    """Follower side: where to truncate given the leader's `diverging` epoch and end offset.

    Kafka `getOffsetTruncationState`, with E = `diverging.epoch`:

    - The follower has epochs <= E and its largest such epoch is E: both logs agree up
      to the end of E on the shorter side, so truncate to
      min(leader's end of E, follower's end of E, LEO) (complete).
    - Its largest epoch <= E is older than E (it never saw E): truncate to the end of
      that older epoch, min(follower's end of it, LEO), and fetch again with the new
      last epoch; the leader answers again (not complete).
    - It has no epoch to compare (empty cache, or E beyond its latest epoch because the
      cache changed since the fetch was sent): truncate to min(leader's end, LEO).

    Raises `ValueError` on an answer without an epoch or an end offset: a leader never
    sends one (`diverging_epoch_for_fetch` raises instead).
    """
    if diverging.epoch < 0 or diverging.end_offset < 0:
        raise ValueError(f"not a diverging epoch: {diverging}")
    local = end_offset_for(local_entries, diverging.epoch, log_end_offset)
    if local.end_offset == UNKNOWN:
        return TruncationPoint(offset=min(diverging.end_offset, log_end_offset), complete=True)
    if local.epoch != diverging.epoch:
        return TruncationPoint(offset=min(local.end_offset, log_end_offset), complete=False)
    return TruncationPoint(
        offset=min(local.end_offset, diverging.end_offset, log_end_offset), complete=True
    )


class OutOfRangeReset(msgspec.Struct, frozen=True, kw_only=True):
    """How a follower recovers from OFFSET_OUT_OF_RANGE on a replica fetch.

    `truncate_to`: truncate the local log to this offset and fetch from it.
    `start_at`: empty the local log and restart it at this offset (Kafka
    `truncateFullyAndStartAt`). Exactly one of the two is set (the other is None).
    """

    truncate_to: int | None
    start_at: int | None


def out_of_range_reset(
    *, log_end_offset: int, leader_log_start_offset: int, leader_log_end_offset: int
) -> OutOfRangeReset:
    """Kafka `AbstractFetcherThread.fetchOffsetAndTruncate` as a decision.

    - Leader's LEO below ours (possible only after an unclean election): truncate to it.
    - Leader's log start above our LEO (retention passed us): restart at it.
    - Otherwise our LEO is inside the leader's log: fetch again from it (truncate_to = LEO,
      a no-op truncation).
    """
    if leader_log_end_offset < log_end_offset:
        return OutOfRangeReset(truncate_to=leader_log_end_offset, start_at=None)
    if leader_log_start_offset > log_end_offset:
        return OutOfRangeReset(truncate_to=None, start_at=leader_log_start_offset)
    return OutOfRangeReset(truncate_to=log_end_offset, start_at=None)
