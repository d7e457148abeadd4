"""ISR rules: follower progress (updateFetchState), caught-up, shrink, expand, AlterPartition."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.replica.isr import (
    AlterPartitionItem,
    AlterPartitionOutcome,
    AlterPartitionResult,
    ExpandIsr,
    IllegalIsrChange,
    IsrChange,
    NotAFollowerError,
    ShrinkIsr,
    apply_alter_partition_result,
    caught_up_candidates,
    is_caught_up,
    pending_alter_partition,
    propose_isr_change,
    record_follower_fetch,
    replica_to_expand,
    replicas_to_shrink,
    reset_follower_progress,
    update_follower_progress,
)
from broker.replica.state import (
    UNKNOWN,
    CommittedIsr,
    FollowerProgress,
    IsrState,
    LeaderState,
    PendingExpandIsr,
    PendingShrinkIsr,
)
from minikafka.errors import ErrorCode

LAG_MS = 10_000
#: The brokers the metadata shows live and unfenced, with their current broker epochs.
ELIGIBLE = {1: 10, 2: 20, 3: 30, 4: 40}


def progress(
    broker_id: int = 2,
    *,
    leo: int = UNKNOWN,
    caught_up_ms: int = 0,
    fetch_ms: int = 0,
    fetch_leader_leo: int = UNKNOWN,
    broker_epoch: int | None = None,
) -> FollowerProgress:
    return FollowerProgress(
        broker_id=broker_id,
        log_end_offset=leo,
        last_caught_up_time_ms=caught_up_ms,
        last_fetch_time_ms=fetch_ms,
        last_fetch_leader_leo=fetch_leader_leo,
        broker_epoch=ELIGIBLE.get(broker_id, UNKNOWN) if broker_epoch is None else broker_epoch,
    )


def leader(
    *,
    isr_state: IsrState | None = None,
    followers: tuple[FollowerProgress, ...] = (),
    hw: int = 10,
    epoch_start: int = 5,
    replicas: tuple[int, ...] = (1, 2, 3),
    partition_epoch: int = 7,
) -> LeaderState:
    return LeaderState(
        topic="t",
        partition=0,
        leader_id=1,
        leader_epoch=4,
        partition_epoch=partition_epoch,
        replicas=replicas,
        isr_state=isr_state or CommittedIsr(isr=frozenset({1, 2, 3})),
        followers=followers or (progress(2), progress(3)),
        high_watermark=hw,
        min_insync_replicas=2,
        leader_epoch_start_offset=epoch_start,
    )


# ---- state.py derived properties ------------------------------------------------------------


@pytest.mark.parametrize(
    ("isr_state", "maximal", "inflight"),
    [
        pytest.param(CommittedIsr(isr=frozenset({1, 2})), {1, 2}, False, id="committed"),
        pytest.param(
            PendingExpandIsr(
                isr=frozenset({1, 2}), adding=3, adding_broker_epoch=30, sent_partition_epoch=1
            ),
            {1, 2, 3},
            True,
            id="expand-counts-new-member-at-once",
        ),
        pytest.param(
            PendingShrinkIsr(
                isr=frozenset({1, 2, 3}), removing=frozenset({3}), sent_partition_epoch=1
            ),
            {1, 2, 3},
            True,
            id="shrink-counts-only-once-committed",
        ),
    ],
)
def test_maximal_isr_and_inflight(isr_state: IsrState, maximal: set[int], inflight: bool) -> None:
    assert isr_state.maximal_isr == frozenset(maximal)
    assert isr_state.is_inflight is inflight
    assert leader(isr_state=isr_state).isr == isr_state.isr


# ---- is_caught_up ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("leo", "caught_up_ms", "now_ms", "expected"),
    [
        pytest.param(100, 0, 50_000, True, id="at-leader-leo"),
        pytest.param(101, 0, 50_000, True, id="beyond-leader-leo"),
        pytest.param(99, 40_000, 50_000, True, id="behind-but-within-window-exactly"),
        pytest.param(99, 39_999, 50_000, False, id="behind-and-window-expired"),
        pytest.param(UNKNOWN, 0, 50_000, False, id="unknown-leo-never-caught-up"),
        pytest.param(UNKNOWN, 45_000, 50_000, True, id="unknown-leo-armed-by-reset"),
    ],
)
def test_is_caught_up(leo: int, caught_up_ms: int, now_ms: int, expected: bool) -> None:
    p = progress(leo=leo, caught_up_ms=caught_up_ms)
    assert (
        is_caught_up(p, leader_leo=100, now_ms=now_ms, replica_lag_time_max_ms=LAG_MS) is expected
    )


# ---- update_follower_progress (Kafka Replica.updateFetchState) -------------------------------


@pytest.mark.parametrize(
    ("before", "fetch_offset", "leader_leo", "now_ms", "caught_up_ms", "fetch_leader_leo"),
    [
        pytest.param(
            progress(caught_up_ms=100, fetch_ms=900, fetch_leader_leo=40),
            50,
            50,
            1000,
            1000,
            50,
            id="at-current-leo-caught-up-now",
        ),
        pytest.param(
            progress(caught_up_ms=100, fetch_ms=900, fetch_leader_leo=40),
            45,
            50,
            1000,
            900,
            50,
            id="at-previous-leo-caught-up-at-previous-fetch",
        ),
        pytest.param(
            progress(caught_up_ms=100, fetch_ms=900, fetch_leader_leo=40),
            39,
            50,
            1000,
            100,
            50,
            id="behind-previous-leo-unchanged",
        ),
        pytest.param(
            progress(caught_up_ms=2000, fetch_ms=900, fetch_leader_leo=40),
            45,
            50,
            1000,
            2000,
            50,
            id="caught-up-time-never-goes-back",
        ),
        pytest.param(
            progress(caught_up_ms=100, fetch_ms=900, fetch_leader_leo=60),
            45,
            50,
            1000,
            100,
            60,
            id="leader-leo-seen-keeps-maximum",
        ),
    ],
)
def test_update_follower_progress(
    before: FollowerProgress,
    fetch_offset: int,
    leader_leo: int,
    now_ms: int,
    caught_up_ms: int,
    fetch_leader_leo: int,
) -> None:
    after = update_follower_progress(
        before, fetch_offset=fetch_offset, leader_leo=leader_leo, now_ms=now_ms
    )
    assert after == FollowerProgress(
        broker_id=before.broker_id,
        log_end_offset=fetch_offset,
        last_caught_up_time_ms=caught_up_ms,
        last_fetch_time_ms=now_ms,
        last_fetch_leader_leo=fetch_leader_leo,
    )


def test_steady_small_produces_still_count_as_caught_up() -> None:
    """Each fetch trails the LEO, but reaches the LEO of the previous fetch: in sync."""
    p = progress(caught_up_ms=0, fetch_ms=0, fetch_leader_leo=UNKNOWN)
    leader_leo = 10
    for step in range(1, 50):
        now_ms = step * 1000
        p = update_follower_progress(
            p, fetch_offset=leader_leo, leader_leo=leader_leo + 1, now_ms=now_ms
        )
        leader_leo += 1
        assert is_caught_up(p, leader_leo=leader_leo, now_ms=now_ms, replica_lag_time_max_ms=LAG_MS)
        assert p.last_caught_up_time_ms == now_ms - 1000 or step == 1


@given(
    fetches=st.lists(
        st.tuples(st.integers(0, 1000), st.integers(0, 1000), st.integers(0, 5000)),
        min_size=1,
        max_size=30,
    )
)
def test_progress_times_are_monotonic(fetches: list[tuple[int, int, int]]) -> None:
    p = progress()
    now_ms = 0
    for fetch_offset, leader_leo, dt in fetches:
        now_ms += dt
        nxt = update_follower_progress(
            p, fetch_offset=fetch_offset, leader_leo=leader_leo, now_ms=now_ms
        )
        assert nxt.last_caught_up_time_ms >= p.last_caught_up_time_ms
        assert nxt.last_caught_up_time_ms <= now_ms
        assert nxt.last_fetch_leader_leo >= p.last_fetch_leader_leo
        p = nxt


# ---- reset_follower_progress (Kafka resetReplicaState) ---------------------------------------


@pytest.mark.parametrize(
    ("is_new_leader", "in_sync", "expected"),
    [
        pytest.param(
            True,
            True,
            progress(caught_up_ms=5000, broker_epoch=UNKNOWN),
            id="new-leader-in-sync-forgets-leo-gets-window",
        ),
        pytest.param(
            True,
            False,
            progress(broker_epoch=UNKNOWN),
            id="new-leader-out-of-sync-forgets-everything",
        ),
        pytest.param(
            False,
            True,
            progress(leo=30, caught_up_ms=5000, fetch_ms=5000, fetch_leader_leo=42),
            id="re-elected-in-sync-keeps-leo",
        ),
        pytest.param(
            False,
            False,
            progress(leo=30, caught_up_ms=0, fetch_ms=0, fetch_leader_leo=42),
            id="re-elected-out-of-sync-keeps-leo-no-window",
        ),
    ],
)
def test_reset_follower_progress(
    is_new_leader: bool, in_sync: bool, expected: FollowerProgress
) -> None:
    before = progress(leo=30, caught_up_ms=900, fetch_ms=950, fetch_leader_leo=31)
    after = reset_follower_progress(
        before,
        now_ms=5000,
        leader_epoch_start_offset=42,
        is_new_leader=is_new_leader,
        in_sync=in_sync,
    )
    assert after == expected


# ---- record_follower_fetch -------------------------------------------------------------------


def test_record_follower_fetch_updates_only_that_follower() -> None:
    state = leader()
    after = record_follower_fetch(
        state, broker_id=3, fetch_offset=12, leader_leo=12, now_ms=77, broker_epoch=30
    )
    assert after.follower(2) == state.follower(2)
    assert after.follower(3) == progress(
        3, leo=12, caught_up_ms=77, fetch_ms=77, fetch_leader_leo=12
    )
    assert after.follower(9) is None


@pytest.mark.parametrize(
    ("known_epoch", "fetch_epoch", "expected"),
    [
        pytest.param(
            30,
            31,
            progress(3, leo=4, caught_up_ms=0, fetch_ms=77, fetch_leader_leo=12, broker_epoch=31),
            id="kip-903-new-incarnation-starts-afresh",
        ),
        pytest.param(
            30,
            29,
            progress(3, leo=12, caught_up_ms=50, fetch_ms=50, fetch_leader_leo=12),
            id="kip-903-older-incarnation-changes-nothing",
        ),
        pytest.param(
            UNKNOWN,
            30,
            progress(3, leo=4, caught_up_ms=50, fetch_ms=77, fetch_leader_leo=12, broker_epoch=30),
            id="progress-without-epoch-adopts-the-fetchs",
        ),
    ],
)
def test_record_follower_fetch_keys_progress_by_incarnation(
    known_epoch: int, fetch_epoch: int, expected: FollowerProgress
) -> None:
    """A follower caught up at 12 in one incarnation fetches at 4 (it lost its tail)."""
    before = progress(
        3, leo=12, caught_up_ms=50, fetch_ms=50, fetch_leader_leo=12, broker_epoch=known_epoch
    )
    state = leader(followers=(progress(2), before))
    after = record_follower_fetch(
        state, broker_id=3, fetch_offset=4, leader_leo=12, now_ms=77, broker_epoch=fetch_epoch
    )
    assert after.follower(3) == expected


@pytest.mark.parametrize(
    "broker_id", [pytest.param(1, id="leader-itself"), pytest.param(9, id="not-a-replica")]
)
def test_record_follower_fetch_refuses_non_followers(broker_id: int) -> None:
    with pytest.raises(NotAFollowerError, match=f"broker {broker_id} is not a follower") as err:
        record_follower_fetch(leader(), broker_id=broker_id, fetch_offset=1, leader_leo=1, now_ms=1)
    assert err.value.code == ErrorCode.NOT_LEADER_OR_FOLLOWER


# ---- replicas_to_shrink ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        pytest.param(
            leader(followers=(progress(2, leo=20), progress(3, leo=20))), set(), id="all-caught-up"
        ),
        pytest.param(
            leader(followers=(progress(2, leo=20), progress(3, leo=15, caught_up_ms=100))),
            {3},
            id="one-lagging-beyond-window",
        ),
        pytest.param(
            leader(followers=(progress(2, leo=15, caught_up_ms=45_000), progress(3, leo=20))),
            set(),
            id="lagging-within-window",
        ),
        pytest.param(
            leader(
                isr_state=PendingExpandIsr(
                    isr=frozenset({1, 2, 3}),
                    adding=4,
                    adding_broker_epoch=40,
                    sent_partition_epoch=7,
                ),
                followers=(progress(2), progress(3)),
            ),
            set(),
            id="nothing-while-inflight",
        ),
        pytest.param(
            leader(
                isr_state=CommittedIsr(isr=frozenset({1, 2, 5})), followers=(progress(2, leo=20),)
            ),
            {5},
            id="isr-member-without-progress-is-out",
        ),
        pytest.param(
            leader(
                isr_state=CommittedIsr(isr=frozenset({1})), followers=(progress(2), progress(3))
            ),
            set(),
            id="leader-alone-never-removed",
        ),
    ],
)
def test_replicas_to_shrink(state: LeaderState, expected: set[int]) -> None:
    got = replicas_to_shrink(state, leader_leo=20, now_ms=50_000, replica_lag_time_max_ms=LAG_MS)
    assert got == frozenset(expected)


# ---- replica_to_expand ---------------------------------------------------------------------------


ISR_12 = CommittedIsr(isr=frozenset({1, 2}))


@pytest.mark.parametrize(
    ("state", "fetched_by", "eligible", "expected"),
    [
        pytest.param(
            leader(isr_state=ISR_12, followers=(progress(2, leo=10), progress(3, leo=10))),
            3,
            ELIGIBLE,
            3,
            id="at-hw-and-past-epoch-start",
        ),
        pytest.param(
            leader(isr_state=ISR_12, followers=(progress(2, leo=10), progress(3, leo=9))),
            3,
            ELIGIBLE,
            None,
            id="below-hw",
        ),
        pytest.param(
            leader(
                isr_state=ISR_12, hw=3, epoch_start=5, followers=(progress(2), progress(3, leo=4))
            ),
            3,
            ELIGIBLE,
            None,
            id="above-hw-but-below-epoch-start",
        ),
        pytest.param(
            leader(isr_state=ISR_12, followers=(progress(2, leo=10), progress(3, leo=10))),
            3,
            {1: 10, 2: 20},
            None,
            id="fenced-or-shutting-down-broker",
        ),
        pytest.param(
            leader(
                isr_state=ISR_12,
                followers=(progress(2, leo=10), progress(3, leo=10, broker_epoch=30)),
            ),
            3,
            {**ELIGIBLE, 3: 31},
            None,
            id="kip-903-progress-of-a-previous-incarnation",
        ),
        pytest.param(
            leader(
                isr_state=ISR_12,
                followers=(progress(2, leo=10), progress(3, leo=10, broker_epoch=UNKNOWN)),
            ),
            3,
            ELIGIBLE,
            None,
            id="kip-903-progress-without-an-epoch",
        ),
        pytest.param(
            leader(isr_state=ISR_12, followers=(progress(2, leo=10), progress(3, leo=10))),
            2,
            ELIGIBLE,
            None,
            id="kip-903-another-followers-fetch-never-adds-3",
        ),
        pytest.param(
            leader(
                isr_state=PendingShrinkIsr(
                    isr=frozenset({1, 2}), removing=frozenset({2}), sent_partition_epoch=7
                ),
                followers=(progress(2), progress(3, leo=10)),
            ),
            3,
            ELIGIBLE,
            None,
            id="nothing-while-inflight",
        ),
        pytest.param(
            leader(isr_state=ISR_12, followers=(progress(2, leo=10),)),
            3,
            ELIGIBLE,
            None,
            id="replica-without-progress",
        ),
        pytest.param(
            leader(followers=(progress(2, leo=10), progress(3, leo=10))),
            3,
            ELIGIBLE,
            None,
            id="already-in-isr",
        ),
        pytest.param(
            leader(isr_state=CommittedIsr(isr=frozenset({1}))),
            1,
            ELIGIBLE,
            None,
            id="the-leader-itself",
        ),
    ],
)
def test_replica_to_expand(
    state: LeaderState, fetched_by: int, eligible: dict[int, int], expected: int | None
) -> None:
    assert replica_to_expand(state, broker_id=fetched_by, eligible_epochs=eligible) == expected


def test_caught_up_candidates_excludes_maximal_isr_and_ineligible() -> None:
    state = leader(
        isr_state=CommittedIsr(isr=frozenset({1})),
        replicas=(1, 2, 3, 4),
        followers=(progress(2, leo=20), progress(3, leo=20), progress(4, leo=5)),
    )
    got = caught_up_candidates(
        state,
        leader_leo=20,
        now_ms=50_000,
        replica_lag_time_max_ms=LAG_MS,
        eligible_epochs={**ELIGIBLE, 3: 31},
    )
    assert got == frozenset({2})
    pending = msgspec.structs.replace(
        state,
        isr_state=PendingExpandIsr(
            isr=frozenset({1}), adding=2, adding_broker_epoch=20, sent_partition_epoch=7
        ),
    )
    assert caught_up_candidates(
        pending,
        leader_leo=20,
        now_ms=50_000,
        replica_lag_time_max_ms=LAG_MS,
        eligible_epochs=ELIGIBLE,
    ) == {3}


# ---- propose_isr_change / pending_alter_partition --------------------------------------------


@pytest.mark.parametrize(
    ("change", "pending", "new_isr", "epochs"),
    [
        pytest.param(
            ExpandIsr(adding=3),
            PendingExpandIsr(
                isr=frozenset({1, 2}), adding=3, adding_broker_epoch=30, sent_partition_epoch=7
            ),
            (1, 2, 3),
            ((1, UNKNOWN), (2, UNKNOWN), (3, 30)),
            id="expand-carries-the-added-members-epoch",
        ),
        pytest.param(
            ShrinkIsr(removing=frozenset({2})),
            PendingShrinkIsr(
                isr=frozenset({1, 2}), removing=frozenset({2}), sent_partition_epoch=7
            ),
            (1,),
            ((1, UNKNOWN),),
            id="shrink",
        ),
    ],
)
def test_propose_isr_change(
    change: IsrChange,
    pending: IsrState,
    new_isr: tuple[int, ...],
    epochs: tuple[tuple[int, int], ...],
) -> None:
    state = leader(isr_state=ISR_12)
    assert pending_alter_partition(state) is None
    after, item = propose_isr_change(state, change)
    assert after.isr_state == pending
    assert after.isr == frozenset({1, 2})  # nothing committed yet
    assert item == AlterPartitionItem(
        topic="t",
        partition=0,
        leader_epoch=4,
        partition_epoch=7,
        new_isr=new_isr,
        new_isr_with_epochs=epochs,
        leader_min_insync_replicas=2,  # the leader's own minimum, for the controller's ELR
    )
    assert pending_alter_partition(after) == item


@pytest.mark.parametrize(
    ("isr_state", "change", "message"),
    [
        pytest.param(
            PendingExpandIsr(
                isr=frozenset({1, 2}), adding=3, adding_broker_epoch=30, sent_partition_epoch=7
            ),
            ShrinkIsr(removing=frozenset({2})),
            "already in flight",
            id="one-change-in-flight",
        ),
        pytest.param(ISR_12, ExpandIsr(adding=2), "cannot add 2", id="add-existing-member"),
        pytest.param(ISR_12, ExpandIsr(adding=9), "cannot add 9", id="add-non-replica"),
        pytest.param(ISR_12, ShrinkIsr(removing=frozenset()), "cannot remove", id="empty-shrink"),
        pytest.param(
            ISR_12, ShrinkIsr(removing=frozenset({1})), "cannot remove", id="remove-leader"
        ),
        pytest.param(
            ISR_12, ShrinkIsr(removing=frozenset({3})), "cannot remove", id="remove-non-member"
        ),
    ],
)
def test_propose_isr_change_refuses_illegal_changes(
    isr_state: IsrState, change: IsrChange, message: str
) -> None:
    with pytest.raises(IllegalIsrChange, match=message):
        propose_isr_change(leader(isr_state=isr_state), change)


# ---- apply_alter_partition_result --------------------------------------------------------------


def _pending_shrink() -> tuple[LeaderState, AlterPartitionItem]:
    return propose_isr_change(leader(), ShrinkIsr(removing=frozenset({3})))


def _pending_expand() -> tuple[LeaderState, AlterPartitionItem]:
    return propose_isr_change(leader(isr_state=ISR_12), ExpandIsr(adding=3))


def ok(isr: set[int], *, leader_epoch: int = 4, partition_epoch: int = 8) -> AlterPartitionResult:
    return AlterPartitionResult(
        error_code=ErrorCode.NONE,
        leader_epoch=leader_epoch,
        isr=frozenset(isr),
        partition_epoch=partition_epoch,
    )


def err(code: ErrorCode) -> AlterPartitionResult:
    return AlterPartitionResult(error_code=code)


@pytest.mark.parametrize(
    ("result", "outcome", "isr_state", "partition_epoch"),
    [
        pytest.param(
            ok({1, 2}),
            AlterPartitionOutcome.COMMITTED,
            CommittedIsr(isr=frozenset({1, 2})),
            8,
            id="committed",
        ),
        pytest.param(
            ok({1, 2}, partition_epoch=7),
            AlterPartitionOutcome.COMMITTED,
            CommittedIsr(isr=frozenset({1, 2})),
            7,
            id="committed-no-op-same-epoch",
        ),
        pytest.param(
            ok({1, 2}, leader_epoch=5),
            AlterPartitionOutcome.AWAIT_METADATA,
            None,
            7,
            id="other-leader-epoch",
        ),
        pytest.param(
            ok({1, 2}, partition_epoch=6),
            AlterPartitionOutcome.AWAIT_METADATA,
            None,
            7,
            id="older-partition-epoch",
        ),
        pytest.param(
            err(ErrorCode.INELIGIBLE_REPLICA),
            AlterPartitionOutcome.REVERTED,
            CommittedIsr(isr=frozenset({1, 2, 3})),
            7,
            id="definitely-not-applied-reverts",
        ),
        *(
            pytest.param(
                err(code),
                AlterPartitionOutcome.AWAIT_METADATA,
                None,
                7,
                id=f"stale-view-{code.name}",
            )
            for code in (
                ErrorCode.FENCED_LEADER_EPOCH,
                ErrorCode.INVALID_UPDATE_VERSION,
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                ErrorCode.NOT_LEADER_OR_FOLLOWER,
                ErrorCode.INVALID_REQUEST,
            )
        ),
        *(
            pytest.param(
                err(code), AlterPartitionOutcome.RETRY, None, 7, id=f"unknown-outcome-{code.name}"
            )
            for code in (
                ErrorCode.REQUEST_TIMED_OUT,
                ErrorCode.NOT_CONTROLLER,
                ErrorCode.STALE_BROKER_EPOCH,
                ErrorCode.UNKNOWN_SERVER_ERROR,
            )
        ),
    ],
)
def test_apply_alter_partition_result_for_shrink(
    result: AlterPartitionResult,
    outcome: AlterPartitionOutcome,
    isr_state: IsrState | None,
    partition_epoch: int,
) -> None:
    pending, sent = _pending_shrink()
    after, got = apply_alter_partition_result(pending, sent, result)
    assert got is outcome
    assert after.isr_state == (isr_state or pending.isr_state)
    assert after.partition_epoch == partition_epoch
    if isr_state is None:
        assert after is pending  # still pending: the shell may resend the same item
        assert pending_alter_partition(after) == sent


def test_pending_expand_is_never_reverted_on_unknown_outcome() -> None:
    """If the controller did commit the expand, dropping the new member would let the HW
    pass a true ISR member's LEO; so it keeps counting until the truth is known."""
    pending, sent = _pending_expand()
    after, outcome = apply_alter_partition_result(pending, sent, err(ErrorCode.REQUEST_TIMED_OUT))
    assert outcome is AlterPartitionOutcome.RETRY
    assert after.maximal_isr == frozenset({1, 2, 3})
    committed, outcome = apply_alter_partition_result(after, sent, ok({1, 2, 3}))
    assert outcome is AlterPartitionOutcome.COMMITTED
    assert committed.isr_state == CommittedIsr(isr=frozenset({1, 2, 3}))


@pytest.mark.parametrize(
    "state",
    [
        pytest.param(leader(), id="nothing-in-flight"),
        pytest.param(_pending_expand()[0], id="another-proposal-in-flight"),
    ],
)
def test_response_to_a_proposal_no_longer_in_flight_is_ignored(state: LeaderState) -> None:
    _, sent = _pending_shrink()
    after, outcome = apply_alter_partition_result(state, sent, ok({1, 2}))
    assert outcome is AlterPartitionOutcome.STALE_RESPONSE
    assert after is state
