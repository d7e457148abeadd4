"""The Raft protocol rules as pure functions: majority, high watermark, votes, divergence.

Caller: `core.RaftNode`, which owns the mutable state and passes every input in. Each rule
has a named-row table test in `tests/unit/controller/raft/test_raft_rules.py`.

Epoch caches are sequences of `(epoch, start_offset)` pairs, strictly increasing in epoch
and non-decreasing in offset, describing the entries a node holds; after a snapshot the
first pair is the snapshot's epoch at the log start offset (that epoch may have started
earlier, so the next epoch may start at the same offset; and a fetch whose last epoch is
older than the first pair cannot be checked and must load the snapshot).

The divergence rules are the Raft twin of the data plane's `broker/replica/truncation.py`
(Kafka `LeaderEpochFileCache.endOffsetFor`, `Partition.readRecords` fetch validation and
`AbstractFetcherThread` truncation), restated here because `controller` never imports
`broker`; the differences are the snapshot cases (KIP-630) and that an unanswerable fetch
is a value (`FetchPosition`) rather than an exception.
"""

from __future__ import annotations

import bisect
import enum
from collections.abc import Sequence

import msgspec

from controller.raft.messages import EpochEndOffset

#: One epoch cache entry: (leader epoch, offset of its first entry).
EpochStart = tuple[int, int]


def majority(voter_count: int) -> int:
    """How many voters make a majority: more than half."""
    if voter_count < 1:
        raise ValueError(f"a quorum needs at least one voter, got {voter_count}")
    return voter_count // 2 + 1


# ---- high watermark -------------------------------------------------------------------------


def leader_high_watermark(
    *, voter_end_offsets: Sequence[int], epoch_start_offset: int, current: int | None
) -> int | None:
    """The leader's high watermark after a change of the voters' replicated end offsets.

    `voter_end_offsets` holds one end offset per voter: the leader's own *durable* end and,
    for each follower, the fetch offset of its latest valid fetch in this epoch (0 if it has
    not fetched). The candidate is the largest offset that a majority has reached (etcd's
    `CommittedIndex`: sort descending, take position n // 2). It becomes the high watermark
    only if it includes the leader's first entry of this epoch (candidate >
    `epoch_start_offset`, Raft's "commit only entries of the current term", which also makes
    the new leader wait for its leader-change marker) and only if it is larger than
    `current`: the high watermark never goes back.
    """
    if not voter_end_offsets:
        raise ValueError("no voters")
    ordered = sorted(voter_end_offsets, reverse=True)
    reached = ordered[len(ordered) // 2]
    if reached <= epoch_start_offset:
        return current
    if current is not None and reached <= current:
        return current
    return reached


def follower_high_watermark(
    *, leader_high_watermark: int | None, log_end_offset: int, current: int
) -> int:
    """A follower's high watermark after a valid fetch response: the leader's, capped by
    what it holds (its log matches the leader's up to its end after a validated fetch), and
    never lower than before."""
    if leader_high_watermark is None:
        return current
    return max(current, min(leader_high_watermark, log_end_offset))


# ---- elections ------------------------------------------------------------------------------


def log_is_up_to_date(
    *, candidate_last_epoch: int, candidate_end_offset: int, last_epoch: int, end_offset: int
) -> bool:
    """Raft's election restriction: the candidate's log is at least as up to date as ours
    (compare the last epoch, then the length)."""
    return (candidate_last_epoch, candidate_end_offset) >= (last_epoch, end_offset)


class VoteDecision(msgspec.Struct, frozen=True, kw_only=True):
    granted: bool
    reason: str


def vote_decision(
    *,
    candidate_id: int,
    request_epoch: int,
    candidate_last_epoch: int,
    candidate_end_offset: int,
    current_epoch: int,
    voted_for: int | None,
    leader_id: int | None,
    can_vote: bool,
    last_epoch: int,
    end_offset: int,
) -> VoteDecision:
    """Whether to grant a (binding) vote.

    The caller has already moved to `request_epoch` when it was higher than its own (as an
    unattached voter that has not voted), so here `current_epoch` >= `request_epoch`. A vote
    is granted only in the current epoch, by a node allowed to vote, when the epoch has no
    known leader, when it has not voted for anyone else in this epoch (one vote per epoch,
    the persisted `voted_for`) and when the candidate's log is at least as up to date.
    """
    if not can_vote:
        return VoteDecision(granted=False, reason="this node has not caught up (new directory)")
    if request_epoch < current_epoch:
        return VoteDecision(granted=False, reason=f"stale epoch {request_epoch} < {current_epoch}")
    if request_epoch > current_epoch:
        raise ValueError(f"move to epoch {request_epoch} before deciding (at {current_epoch})")
    if leader_id is not None:
        return VoteDecision(granted=False, reason=f"epoch {current_epoch} has leader {leader_id}")
    if voted_for is not None and voted_for != candidate_id:
        return VoteDecision(granted=False, reason=f"already voted for {voted_for}")
    if not log_is_up_to_date(
        candidate_last_epoch=candidate_last_epoch,
        candidate_end_offset=candidate_end_offset,
        last_epoch=last_epoch,
        end_offset=end_offset,
    ):
        return VoteDecision(granted=False, reason="candidate's log is behind")
    return VoteDecision(granted=True, reason="granted")


def pre_vote_decision(
    *,
    request_epoch: int,
    candidate_last_epoch: int,
    candidate_end_offset: int,
    current_epoch: int,
    leader_recently_seen: bool,
    can_vote: bool,
    last_epoch: int,
    end_offset: int,
) -> VoteDecision:
    """Whether to grant a pre-vote (KIP-996); granting changes nothing on this node.

    `request_epoch` is the epoch the prospective candidate would stand in. Rejected when
    this node is not allowed to vote, when that epoch is not above ours (the sender is
    behind: it learns our epoch from the response), when this node is the leader or has
    heard from a leader within the fetch timeout (`leader_recently_seen`: a node cut off
    from a healthy leader must not be able to depose it when it returns; the caller does not
    count the leader itself: a pre-vote *from* the leader it follows means that leader
    restarted or resigned), and when the candidate's log is behind ours.
    """
    if not can_vote:
        return VoteDecision(granted=False, reason="this node has not caught up (new directory)")
    if request_epoch <= current_epoch:
        return VoteDecision(
            granted=False, reason=f"pre-vote epoch {request_epoch} <= current {current_epoch}"
        )
    if leader_recently_seen:
        return VoteDecision(granted=False, reason="a leader is alive")
    if not log_is_up_to_date(
        candidate_last_epoch=candidate_last_epoch,
        candidate_end_offset=candidate_end_offset,
        last_epoch=last_epoch,
        end_offset=end_offset,
    ):
        return VoteDecision(granted=False, reason="candidate's log is behind")
    return VoteDecision(granted=True, reason="granted")


class ElectionOutcome(enum.Enum):
    PENDING = "pending"
    WON = "won"
    LOST = "lost"


def election_outcome(*, voter_count: int, granted: int, rejected: int) -> ElectionOutcome:
    """WON with a majority of grants (the candidate's own included), LOST once a majority
    can no longer be reached, PENDING otherwise."""
    needed = majority(voter_count)
    if granted >= needed:
        return ElectionOutcome.WON
    if voter_count - rejected < needed:
        return ElectionOutcome.LOST
    return ElectionOutcome.PENDING


# ---- divergence (leader side) ---------------------------------------------------------------


def end_offset_for(
    epochs: Sequence[EpochStart], requested_epoch: int, log_end_offset: int
) -> EpochEndOffset | None:
    """Where `requested_epoch` ends on this log (Kafka `LeaderEpochFileCache.endOffsetFor`).

    - It is the latest epoch: it ends at `log_end_offset`.
    - No epoch above it (beyond the latest, or an empty cache): None (unknown).
    - No epoch at or below it: (requested, start of the first epoch): everything held here
      is in later epochs.
    - Otherwise: (largest epoch <= requested, start offset of the next epoch).
    """
    if epochs and epochs[-1][0] == requested_epoch:
        return EpochEndOffset(epoch=requested_epoch, end_offset=log_end_offset)
    higher = bisect.bisect_right(epochs, (requested_epoch, log_end_offset + 1))
    if higher == len(epochs):
        return None
    if higher == 0:
        return EpochEndOffset(epoch=requested_epoch, end_offset=epochs[0][1])
    return EpochEndOffset(epoch=epochs[higher - 1][0], end_offset=epochs[higher][1])


class PositionKind(enum.Enum):
    VALID = "valid"  # the follower's log is a prefix of ours up to fetch_offset
    DIVERGING = "diverging"  # truncate to where `diverging` says, then fetch again
    SNAPSHOT = "snapshot"  # below our log start (or not checkable against it): load snapshot


class FetchPosition(msgspec.Struct, frozen=True, kw_only=True):
    kind: PositionKind
    diverging: EpochEndOffset | None = None


VALID_POSITION = FetchPosition(kind=PositionKind.VALID)
SNAPSHOT_POSITION = FetchPosition(kind=PositionKind.SNAPSHOT)


def validate_fetch_position(
    *,
    epochs: Sequence[EpochStart],
    log_start_offset: int,
    log_end_offset: int,
    fetch_offset: int,
    last_fetched_epoch: int,
) -> FetchPosition:
    """Leader side of KIP-595 fetch validation (Kafka `validateOffsetAndEpoch`).

    - `fetch_offset` below our log start: SNAPSHOT (the entries are only in the snapshot).
    - `last_fetched_epoch` older than our first known epoch while we have a snapshot: the
      follower's position cannot be checked against our log: SNAPSHOT.
    - Look up where `last_fetched_epoch` ends here. The follower diverges when our largest
      epoch <= its epoch is older than its epoch (we never had it) or ends before
      `fetch_offset` (it has entries we lack): DIVERGING with that epoch and end offset.
      An epoch newer than any of ours (impossible for a current leader, whose epoch is the
      newest) is answered with our latest epoch and log end.
    - Otherwise VALID: by the log matching property the follower's log equals ours below
      `fetch_offset`.
    """
    if fetch_offset < log_start_offset:
        return SNAPSHOT_POSITION
    if log_start_offset > 0 and epochs and last_fetched_epoch < epochs[0][0]:
        return SNAPSHOT_POSITION
    if fetch_offset == 0:
        return VALID_POSITION
    found = end_offset_for(epochs, last_fetched_epoch, log_end_offset)
    if found is None:
        latest = epochs[-1][0] if epochs else 0
        return FetchPosition(
            kind=PositionKind.DIVERGING,
            diverging=EpochEndOffset(epoch=latest, end_offset=log_end_offset),
        )
    if found.epoch < last_fetched_epoch or found.end_offset < fetch_offset:
        return FetchPosition(kind=PositionKind.DIVERGING, diverging=found)
    return VALID_POSITION


# ---- divergence (follower side) -------------------------------------------------------------


class TruncationPoint(msgspec.Struct, frozen=True, kw_only=True):
    """Where the follower truncates; `complete` False means fetch again and re-check."""

    offset: int
    complete: bool


def truncation_point(
    *, epochs: Sequence[EpochStart], log_end_offset: int, diverging: EpochEndOffset
) -> TruncationPoint:
    """Follower side: where to truncate given the leader's diverging epoch E and its end.

    - Our largest epoch <= E is E: both logs agree up to the end of E on the shorter side:
      truncate to min(leader's end of E, our end of E, our log end) (complete).
    - It is older than E (we never saw E): truncate to the end of that older epoch and fetch
      again with the new last epoch; the leader answers again (not complete).
    - We have no epoch to compare (empty cache, or E beyond our latest epoch): truncate to
      min(leader's end, our log end).

    The caller refuses a point below its high watermark (committed entries never diverge).
    """
    if diverging.epoch < 0 or diverging.end_offset < 0:
        raise ValueError(f"not a diverging epoch: {diverging}")
    local = end_offset_for(epochs, diverging.epoch, log_end_offset)
    if local is None:
        return TruncationPoint(offset=min(diverging.end_offset, log_end_offset), complete=True)
    if local.epoch != diverging.epoch:
        return TruncationPoint(offset=min(local.end_offset, log_end_offset), complete=False)
    return TruncationPoint(
        offset=min(local.end_offset, diverging.end_offset, log_end_offset), complete=True
    )


# ---- check quorum ---------------------------------------------------------------------------


def check_quorum_deadline(
    *, follower_fetch_ms: Sequence[int | None], voter_count: int, now_ms: int, timeout_ms: int
) -> int | None:
    """When the leader must check again that a majority still fetches, or None: resign.

    `follower_fetch_ms` holds, per other voter, the time of its latest fetch in this epoch
    (None: not yet). The leader counts itself; it needs `majority - 1` followers whose
    latest fetch is less than `timeout_ms` old. If so, the next check is when the oldest of
    those contacts would expire; if not, a majority has not fetched within the timeout.
    """
    needed = majority(voter_count) - 1
    if needed == 0:
        return now_ms + timeout_ms
    contacts = sorted((ms for ms in follower_fetch_ms if ms is not None), reverse=True)
    if len(contacts) >= needed and now_ms - contacts[needed - 1] < timeout_ms:
        return contacts[needed - 1] + timeout_ms
    return None


# ---- graceful resign ------------------------------------------------------------------------


def preferred_successors(end_offsets: dict[int, int], *, leader_id: int) -> tuple[int, ...]:
    """Voters in the order they should stand after a graceful resign (Kafka's
    EndQuorumEpoch): longest replicated log first, ties by id, the leader excluded."""
    return tuple(
        voter
        for voter, _ in sorted(end_offsets.items(), key=lambda item: (-item[1], item[0]))
        if voter != leader_id
    )
