"""Named-row tables of the pure Raft rules (vote, pre-vote, HW, divergence), plus properties."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.raft.messages import EpochEndOffset
from controller.raft.rules import (
    ElectionOutcome,
    EpochStart,
    PositionKind,
    TruncationPoint,
    check_quorum_deadline,
    election_outcome,
    end_offset_for,
    follower_high_watermark,
    leader_high_watermark,
    log_is_up_to_date,
    majority,
    pre_vote_decision,
    preferred_successors,
    truncation_point,
    validate_fetch_position,
    vote_decision,
)


@pytest.mark.parametrize(
    ("voters", "needed"), [(1, 1), (2, 2), (3, 2), (4, 3), (5, 3), (7, 4)], ids=lambda v: str(v)
)
def test_majority(voters: int, needed: int) -> None:
    assert majority(voters) == needed


def test_majority_of_nobody_is_an_error() -> None:
    with pytest.raises(ValueError, match="at least one voter"):
        majority(0)


# ---- high watermark ---------------------------------------------------------------------------

# (voter end offsets, epoch start offset, current HW) -> new HW
LEADER_HW_CASES = [
    ("majority reached", [10, 8, 3], 5, None, 8),
    ("minority ahead does not count", [10, 3, 3], 5, None, None),
    ("only the leader has the marker", [6, 5, 5], 5, None, None),
    ("marker on a majority: ready", [6, 6, 5], 5, None, 6),
    ("majority below epoch start: wait", [20, 5, 5], 5, 5, 5),
    ("never goes back", [10, 7, 7], 5, 9, 9),
    ("equal is no change", [9, 9, 2], 5, 9, 9),
    ("five voters need three", [50, 40, 30, 20, 10], 0, 25, 30),
    ("five voters, two ahead", [50, 40, 3, 3, 3], 0, None, 3),
    ("single voter", [4], 3, None, 4),
    ("four voters need three", [9, 8, 7, 1], 0, None, 7),
]


@pytest.mark.parametrize(
    ("ends", "epoch_start", "current", "expected"),
    [pytest.param(*case[1:], id=case[0]) for case in LEADER_HW_CASES],
)
def test_leader_high_watermark(
    ends: list[int], epoch_start: int, current: int | None, expected: int | None
) -> None:
    assert (
        leader_high_watermark(
            voter_end_offsets=ends, epoch_start_offset=epoch_start, current=current
        )
        == expected
    )


@given(
    ends=st.lists(st.integers(0, 100), min_size=1, max_size=7),
    epoch_start=st.integers(0, 100),
    current=st.none() | st.integers(0, 100),
)
def test_leader_high_watermark_is_majority_replicated_and_monotonic(
    ends: list[int], epoch_start: int, current: int | None
) -> None:
    new = leader_high_watermark(
        voter_end_offsets=ends, epoch_start_offset=epoch_start, current=current
    )
    if new == current:
        return
    assert new is not None
    assert current is None or new > current
    assert new > epoch_start
    assert sum(1 for end in ends if end >= new) >= majority(len(ends))


# (leader HW, log end, current) -> follower HW
FOLLOWER_HW_CASES = [
    ("leader's HW when we hold it", 5, 9, 2, 5),
    ("capped by our log end", 9, 5, 2, 5),
    ("unknown leader HW keeps ours", None, 9, 4, 4),
    ("never goes back", 3, 9, 4, 4),
]


@pytest.mark.parametrize(
    ("leader_hw", "log_end", "current", "expected"),
    [pytest.param(*case[1:], id=case[0]) for case in FOLLOWER_HW_CASES],
)
def test_follower_high_watermark(
    leader_hw: int | None, log_end: int, current: int, expected: int
) -> None:
    assert (
        follower_high_watermark(
            leader_high_watermark=leader_hw, log_end_offset=log_end, current=current
        )
        == expected
    )


# ---- elections --------------------------------------------------------------------------------

UP_TO_DATE_CASES = [
    ("same log", (3, 10), (3, 10), True),
    ("longer in the same epoch", (3, 11), (3, 10), True),
    ("shorter in the same epoch", (3, 9), (3, 10), False),
    ("newer epoch wins over length", (4, 2), (3, 10), True),
    ("older epoch loses despite length", (2, 50), (3, 10), False),
    ("both empty", (0, 0), (0, 0), True),
]


@pytest.mark.parametrize(
    ("candidate", "local", "expected"),
    [pytest.param(*case[1:], id=case[0]) for case in UP_TO_DATE_CASES],
)
def test_log_is_up_to_date(
    candidate: tuple[int, int], local: tuple[int, int], expected: bool
) -> None:
    assert (
        log_is_up_to_date(
            candidate_last_epoch=candidate[0],
            candidate_end_offset=candidate[1],
            last_epoch=local[0],
            end_offset=local[1],
        )
        is expected
    )


# (request epoch, current epoch, voted for, leader, can vote, candidate log, local log) ->
# granted, reason fragment. The candidate is node 2.
VOTE_CASES = [
    ("fresh epoch, good log", 5, 5, None, None, True, (4, 10), (4, 10), True, "granted"),
    ("same candidate again", 5, 5, 2, None, True, (4, 10), (4, 10), True, "granted"),
    ("already voted for another", 5, 5, 3, None, True, (4, 10), (4, 10), False, "voted for 3"),
    ("epoch has a leader", 5, 5, None, 3, True, (4, 10), (4, 10), False, "has leader 3"),
    ("stale epoch", 4, 5, None, None, True, (4, 10), (4, 10), False, "stale"),
    ("candidate log behind", 5, 5, None, None, True, (4, 9), (4, 10), False, "behind"),
    ("candidate older epoch", 5, 5, None, None, True, (3, 99), (4, 10), False, "behind"),
    ("new directory does not vote", 5, 5, None, None, False, (4, 10), (4, 10), False, "caught"),
    ("voted for itself (candidate)", 5, 5, 1, None, True, (4, 10), (4, 10), False, "voted for 1"),
]


@pytest.mark.parametrize(
    (
        "request_epoch",
        "current",
        "voted_for",
        "leader",
        "can_vote",
        "candidate_log",
        "local_log",
        "granted",
        "reason",
    ),
    [pytest.param(*case[1:], id=case[0]) for case in VOTE_CASES],
)
def test_vote_decision(
    request_epoch: int,
    current: int,
    voted_for: int | None,
    leader: int | None,
    can_vote: bool,
    candidate_log: tuple[int, int],
    local_log: tuple[int, int],
    granted: bool,
    reason: str,
) -> None:
    decision = vote_decision(
        candidate_id=2,
        request_epoch=request_epoch,
        candidate_last_epoch=candidate_log[0],
        candidate_end_offset=candidate_log[1],
        current_epoch=current,
        voted_for=voted_for,
        leader_id=leader,
        can_vote=can_vote,
        last_epoch=local_log[0],
        end_offset=local_log[1],
    )
    assert decision.granted is granted
    assert reason in decision.reason


def test_vote_decision_needs_the_epoch_moved_first() -> None:
    with pytest.raises(ValueError, match="move to epoch 6"):
        vote_decision(
            candidate_id=2,
            request_epoch=6,
            candidate_last_epoch=0,
            candidate_end_offset=0,
            current_epoch=5,
            voted_for=None,
            leader_id=None,
            can_vote=True,
            last_epoch=0,
            end_offset=0,
        )


# (request epoch, current epoch, leader recently seen, can vote, candidate log, local log)
PRE_VOTE_CASES = [
    ("leaderless, good log", 6, 5, False, True, (4, 10), (4, 10), True, "granted"),
    ("leader alive: no disruption", 6, 5, True, True, (4, 10), (4, 10), False, "leader is alive"),
    ("sender is behind our epoch", 5, 5, False, True, (4, 10), (4, 10), False, "<= current"),
    ("sender far behind", 3, 5, False, True, (4, 10), (4, 10), False, "<= current"),
    ("candidate log behind", 6, 5, False, True, (4, 9), (4, 10), False, "behind"),
    ("new directory does not vote", 6, 5, False, False, (4, 10), (4, 10), False, "caught"),
    ("returning partitioned node", 9, 5, True, True, (4, 8), (5, 12), False, "leader is alive"),
]


@pytest.mark.parametrize(
    (
        "request_epoch",
        "current",
        "leader_seen",
        "can_vote",
        "candidate_log",
        "local_log",
        "granted",
        "reason",
    ),
    [pytest.param(*case[1:], id=case[0]) for case in PRE_VOTE_CASES],
)
def test_pre_vote_decision(
    request_epoch: int,
    current: int,
    leader_seen: bool,
    can_vote: bool,
    candidate_log: tuple[int, int],
    local_log: tuple[int, int],
    granted: bool,
    reason: str,
) -> None:
    decision = pre_vote_decision(
        request_epoch=request_epoch,
        candidate_last_epoch=candidate_log[0],
        candidate_end_offset=candidate_log[1],
        current_epoch=current,
        leader_recently_seen=leader_seen,
        can_vote=can_vote,
        last_epoch=local_log[0],
        end_offset=local_log[1],
    )
    assert decision.granted is granted
    assert reason in decision.reason


ELECTION_CASES = [
    ("own vote wins a single-voter quorum", 1, 1, 0, ElectionOutcome.WON),
    ("two of three", 3, 2, 0, ElectionOutcome.WON),
    ("one of three, undecided", 3, 1, 1, ElectionOutcome.PENDING),
    ("two rejections of three", 3, 1, 2, ElectionOutcome.LOST),
    ("three of five", 5, 3, 2, ElectionOutcome.WON),
    ("two of five, two rejected", 5, 2, 2, ElectionOutcome.PENDING),
    ("three rejections of five", 5, 1, 3, ElectionOutcome.LOST),
]


@pytest.mark.parametrize(
    ("voters", "granted", "rejected", "outcome"),
    [pytest.param(*case[1:], id=case[0]) for case in ELECTION_CASES],
)
def test_election_outcome(
    voters: int, granted: int, rejected: int, outcome: ElectionOutcome
) -> None:
    assert election_outcome(voter_count=voters, granted=granted, rejected=rejected) is outcome


# ---- divergence ---------------------------------------------------------------------------------

CACHE: list[EpochStart] = [(1, 0), (3, 10), (4, 20)]  # log end 30
SNAPSHOTTED: list[EpochStart] = [(3, 15), (4, 20)]  # snapshot at 15 (epoch 3), log end 30

END_OFFSET_CASES = [
    ("latest epoch ends at log end", CACHE, 4, 30, EpochEndOffset(epoch=4, end_offset=30)),
    ("middle epoch ends where next starts", CACHE, 3, 30, EpochEndOffset(epoch=3, end_offset=20)),
    ("unknown epoch maps to largest below", CACHE, 2, 30, EpochEndOffset(epoch=1, end_offset=10)),
    ("before everything", [(3, 10)], 2, 20, EpochEndOffset(epoch=2, end_offset=10)),
    ("beyond the latest epoch", CACHE, 5, 30, None),
    ("empty cache", [], 1, 0, None),
]


@pytest.mark.parametrize(
    ("epochs", "requested", "log_end", "expected"),
    [pytest.param(*case[1:], id=case[0]) for case in END_OFFSET_CASES],
)
def test_end_offset_for(
    epochs: list[EpochStart], requested: int, log_end: int, expected: EpochEndOffset | None
) -> None:
    assert end_offset_for(epochs, requested, log_end) == expected


# (leader cache, log start, log end, fetch offset, last fetched epoch) -> kind, diverging
FETCH_CASES = [
    ("empty follower", CACHE, 0, 30, 0, 0, PositionKind.VALID, None),
    ("caught up", CACHE, 0, 30, 30, 4, PositionKind.VALID, None),
    ("behind in the same epoch", CACHE, 0, 30, 25, 4, PositionKind.VALID, None),
    ("at an epoch boundary", CACHE, 0, 30, 20, 3, PositionKind.VALID, None),
    (
        "longer in an old epoch",
        CACHE,
        0,
        30,
        23,
        3,
        PositionKind.DIVERGING,
        EpochEndOffset(epoch=3, end_offset=20),
    ),
    (
        "an epoch the leader never had",
        CACHE,
        0,
        30,
        12,
        2,
        PositionKind.DIVERGING,
        EpochEndOffset(epoch=1, end_offset=10),
    ),
    (
        "longer than the leader in its epoch",
        CACHE,
        0,
        30,
        31,
        4,
        PositionKind.DIVERGING,
        EpochEndOffset(epoch=4, end_offset=30),
    ),
    (
        "epoch beyond the leader's",
        CACHE,
        0,
        30,
        31,
        5,
        PositionKind.DIVERGING,
        EpochEndOffset(epoch=4, end_offset=30),
    ),
    ("below the log start", SNAPSHOTTED, 15, 30, 10, 3, PositionKind.SNAPSHOT, None),
    ("older than the snapshot's epoch", SNAPSHOTTED, 15, 30, 15, 2, PositionKind.SNAPSHOT, None),
    ("right at the snapshot", SNAPSHOTTED, 15, 30, 15, 3, PositionKind.VALID, None),
    ("after the snapshot", SNAPSHOTTED, 15, 30, 22, 4, PositionKind.VALID, None),
]


@pytest.mark.parametrize(
    ("epochs", "log_start", "log_end", "fetch_offset", "last_epoch", "kind", "diverging"),
    [pytest.param(*case[1:], id=case[0]) for case in FETCH_CASES],
)
def test_validate_fetch_position(
    epochs: list[EpochStart],
    log_start: int,
    log_end: int,
    fetch_offset: int,
    last_epoch: int,
    kind: PositionKind,
    diverging: EpochEndOffset | None,
) -> None:
    position = validate_fetch_position(
        epochs=epochs,
        log_start_offset=log_start,
        log_end_offset=log_end,
        fetch_offset=fetch_offset,
        last_fetched_epoch=last_epoch,
    )
    assert position.kind is kind
    assert position.diverging == diverging


# (follower cache, follower log end, leader's diverging answer) -> truncation point
TRUNCATION_CASES = [
    (
        "same epoch, leader shorter",
        [(1, 0), (3, 10)],
        25,
        EpochEndOffset(epoch=3, end_offset=20),
        TruncationPoint(offset=20, complete=True),
    ),
    (
        "same epoch, follower's epoch ended first",
        [(1, 0), (3, 10), (5, 18)],
        25,
        EpochEndOffset(epoch=3, end_offset=20),
        TruncationPoint(offset=18, complete=True),
    ),
    (
        "answer above our latest epoch: leader's end",
        [(1, 0), (2, 10)],
        25,
        EpochEndOffset(epoch=3, end_offset=20),
        TruncationPoint(offset=20, complete=True),
    ),
    (
        "follower never saw the epoch",
        [(1, 0), (2, 10), (4, 22)],
        25,
        EpochEndOffset(epoch=3, end_offset=20),
        TruncationPoint(offset=22, complete=False),
    ),
    (
        "older epoch ends before: partial, ask again",
        [(1, 0), (2, 10), (4, 15)],
        25,
        EpochEndOffset(epoch=3, end_offset=20),
        TruncationPoint(offset=15, complete=False),
    ),
    (
        "all of ours is later",
        [(5, 0)],
        8,
        EpochEndOffset(epoch=3, end_offset=20),
        TruncationPoint(offset=0, complete=True),
    ),
    (
        "empty follower cache",
        [],
        0,
        EpochEndOffset(epoch=3, end_offset=20),
        TruncationPoint(offset=0, complete=True),
    ),
]


@pytest.mark.parametrize(
    ("epochs", "log_end", "diverging", "expected"),
    [pytest.param(*case[1:], id=case[0]) for case in TRUNCATION_CASES],
)
def test_truncation_point(
    epochs: list[EpochStart], log_end: int, diverging: EpochEndOffset, expected: TruncationPoint
) -> None:
    assert truncation_point(epochs=epochs, log_end_offset=log_end, diverging=diverging) == expected


def test_truncation_point_refuses_a_non_answer() -> None:
    with pytest.raises(ValueError, match="not a diverging epoch"):
        truncation_point(
            epochs=[(1, 0)], log_end_offset=3, diverging=EpochEndOffset(epoch=-1, end_offset=2)
        )


def _cache(epochs: list[int]) -> list[EpochStart]:
    cache: list[EpochStart] = []
    for offset, epoch in enumerate(epochs):
        if not cache or cache[-1][0] != epoch:
            cache.append((epoch, offset))
    return cache


def _log(draw: st.DrawFn, start_epoch: int) -> list[int]:
    runs = draw(st.lists(st.tuples(st.integers(1, 3), st.integers(1, 4)), max_size=4))
    epochs: list[int] = []
    epoch = start_epoch
    for step, length in runs:
        epoch += step
        epochs.extend([epoch] * length)
    return epochs


@st.composite
def _diverged_logs(draw: st.DrawFn) -> tuple[list[int], list[int]]:
    """Two logs (epochs per offset) with a common prefix, then each its own later epochs.
    Epochs are distinct between the two suffixes except where both copy the prefix, and
    the leader's last epoch is the newest (it is the current leader)."""
    prefix = _log(draw, 0)
    base = prefix[-1] if prefix else 0
    follower = prefix + [epoch * 2 for epoch in _log(draw, base)]
    leader_tail = [epoch * 2 + 1 for epoch in _log(draw, base)]
    top = max([*follower, *leader_tail, 0]) + 1
    leader = prefix + leader_tail + [top]  # the leader's marker in its new epoch
    return follower, leader


@given(_diverged_logs())
def test_fetch_and_truncate_converge_on_the_common_prefix(
    logs: tuple[list[int], list[int]],
) -> None:
    """Follower and leader validate/truncate until the fetch is VALID; the follower is then
    a prefix of the leader's log, and it never truncated into the common prefix."""
    follower, leader = logs
    common = 0
    while common < min(len(follower), len(leader)) and follower[common] == leader[common]:
        common += 1
    for _ in range(20):
        position = validate_fetch_position(
            epochs=_cache(leader),
            log_start_offset=0,
            log_end_offset=len(leader),
            fetch_offset=len(follower),
            last_fetched_epoch=follower[-1] if follower else 0,
        )
        if position.kind is PositionKind.VALID:
            break
        assert position.diverging is not None
        point = truncation_point(
            epochs=_cache(follower), log_end_offset=len(follower), diverging=position.diverging
        )
        assert common <= point.offset <= len(follower)
        assert point.offset < len(follower) or not point.complete
        follower = follower[: point.offset]
    else:
        pytest.fail("fetch validation did not converge in 20 rounds")
    assert follower == leader[: len(follower)]


# (follower fetch times, voters, now) -> next deadline, or None: resign. Timeout 300 ms.
CHECK_QUORUM_CASES = [
    ("single voter never resigns", [], 1, 1000, 1300),
    ("one of two followers fetching", [900, None], 3, 1000, 1200),
    ("the freshest contact counts", [900, 950], 3, 1000, 1250),
    ("nobody fetched since election", [None, None], 3, 1000, None),
    ("stale contact", [650, None], 3, 1000, None),
    ("exactly at the timeout", [700, None], 3, 1000, None),
    ("five voters need two followers", [990, 800, None, None], 5, 1000, 1100),
    ("five voters, one follower", [990, None, None, None], 5, 1000, None),
]


@pytest.mark.parametrize(
    ("fetches", "voters", "now", "expected"),
    [pytest.param(*case[1:], id=case[0]) for case in CHECK_QUORUM_CASES],
)
def test_check_quorum_deadline(
    fetches: list[int | None], voters: int, now: int, expected: int | None
) -> None:
    assert (
        check_quorum_deadline(
            follower_fetch_ms=fetches, voter_count=voters, now_ms=now, timeout_ms=300
        )
        == expected
    )


def test_preferred_successors_longest_log_first() -> None:
    assert preferred_successors({2: 10, 3: 12, 4: 10, 1: 99}, leader_id=1) == (3, 2, 4)
