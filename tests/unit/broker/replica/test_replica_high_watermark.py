"""High watermark (min LEO over the maximal ISR, monotonic, frozen below min ISR) and acks=all."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.replica.high_watermark import (
    ProduceOutcome,
    advance_high_watermark,
    can_append_with_acks_all,
    compute_high_watermark,
    follower_high_watermark,
    latest_offset_available,
    produce_outcome,
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

LAG_MS = 10_000


@pytest.mark.parametrize(
    ("follower_leo", "maximal_isr", "committed_size", "min_isr", "current_hw", "expected"),
    [
        pytest.param({2: 7, 3: 9}, {1, 2, 3}, 3, 2, 5, 7, id="min-over-isr"),
        pytest.param({2: 7, 3: 9}, {1, 3}, 2, 2, 5, 9, id="non-member-ignored"),
        pytest.param({2: 12, 3: 12}, {1, 2, 3}, 3, 2, 5, 10, id="capped-by-leader-leo"),
        pytest.param({2: 3, 3: 9}, {1, 2, 3}, 3, 2, 5, 5, id="never-decreases"),
        pytest.param({3: 9}, {1, 2, 3}, 3, 2, 5, 5, id="missing-follower-holds-hw"),
        pytest.param({2: UNKNOWN, 3: 9}, {1, 2, 3}, 3, 2, 5, 5, id="unknown-follower-holds-hw"),
        pytest.param({2: 8, 3: 9}, {1, 2, 3}, 1, 2, 5, 5, id="frozen-below-min-isr"),
        pytest.param({}, {1}, 1, 1, 5, 10, id="leader-alone-min-isr-1"),
        pytest.param({1: 0, 2: 8}, {1, 2}, 2, 2, 5, 8, id="leader-own-entry-ignored"),
    ],
)
def test_compute_high_watermark(
    follower_leo: dict[int, int],
    maximal_isr: set[int],
    committed_size: int,
    min_isr: int,
    current_hw: int,
    expected: int,
) -> None:
    hw = compute_high_watermark(
        leader_id=1,
        leader_leo=10,
        follower_leo=follower_leo,
        maximal_isr=frozenset(maximal_isr),
        committed_isr_size=committed_size,
        min_isr=min_isr,
        current_hw=current_hw,
    )
    assert hw == expected


@given(
    leader_leo=st.integers(0, 100),
    leos=st.dictionaries(st.integers(2, 5), st.integers(-1, 100), max_size=4),
    members=st.frozensets(st.integers(2, 5)),
    committed_size=st.integers(1, 5),
    min_isr=st.integers(1, 3),
    current_hw=st.integers(0, 100),
)
def test_high_watermark_properties(
    leader_leo: int,
    leos: dict[int, int],
    members: frozenset[int],
    committed_size: int,
    min_isr: int,
    current_hw: int,
) -> None:
    maximal = members | {1}
    hw = compute_high_watermark(
        leader_id=1,
        leader_leo=leader_leo,
        follower_leo=leos,
        maximal_isr=maximal,
        committed_isr_size=committed_size,
        min_isr=min_isr,
        current_hw=current_hw,
    )
    assert hw >= current_hw  # never decreases
    if committed_size < min_isr:
        assert hw == current_hw  # frozen below min ISR
    if hw > current_hw:  # an advance never passes any maximal-ISR member's LEO
        assert hw <= leader_leo
        assert all(leos.get(b, UNKNOWN) >= hw for b in members)


# ---- advance_high_watermark over a LeaderState ---------------------------------------------


def leader(isr_state: IsrState, *followers: FollowerProgress, hw: int = 5) -> LeaderState:
    return LeaderState(
        topic="t",
        partition=0,
        leader_id=1,
        leader_epoch=3,
        partition_epoch=4,
        replicas=(1, 2, 3),
        isr_state=isr_state,
        followers=followers,
        high_watermark=hw,
        min_insync_replicas=2,
        leader_epoch_start_offset=0,
    )


#: Brokers the metadata shows live and unfenced, with their current broker epochs.
ELIGIBLE = {1: 10, 2: 20, 3: 30}


def fp(broker_id: int, leo: int, caught_up_ms: int = 0) -> FollowerProgress:
    return FollowerProgress(
        broker_id=broker_id,
        log_end_offset=leo,
        last_caught_up_time_ms=caught_up_ms,
        broker_epoch=ELIGIBLE[broker_id],
    )


@pytest.mark.parametrize(
    ("state", "expected_hw"),
    [
        pytest.param(
            leader(CommittedIsr(isr=frozenset({1, 2})), fp(2, 8), fp(3, 6)), 8, id="committed"
        ),
        pytest.param(
            leader(
                PendingExpandIsr(
                    isr=frozenset({1, 2}), adding=3, adding_broker_epoch=30, sent_partition_epoch=4
                ),
                fp(2, 8),
                fp(3, 6),
            ),
            6,
            id="pending-expand-counts-new-member",
        ),
        pytest.param(
            leader(
                PendingShrinkIsr(
                    isr=frozenset({1, 2, 3}), removing=frozenset({3}), sent_partition_epoch=4
                ),
                fp(2, 8),
                fp(3, 6, caught_up_ms=0),
            ),
            6,
            id="pending-shrink-still-counts-removed-member",
        ),
        pytest.param(
            leader(CommittedIsr(isr=frozenset({1, 2})), fp(2, 8), fp(3, 7, caught_up_ms=45_000)),
            7,
            id="waits-for-caught-up-replica-about-to-join",
        ),
        pytest.param(
            leader(CommittedIsr(isr=frozenset({1})), fp(2, 8), fp(3, 9)),
            5,
            id="frozen-committed-below-min",
        ),
        pytest.param(
            leader(CommittedIsr(isr=frozenset({1, 2})), fp(2, 5), fp(3, 0)),
            5,
            id="unchanged-same-object",
        ),
    ],
)
def test_advance_high_watermark(state: LeaderState, expected_hw: int) -> None:
    after = advance_high_watermark(
        state,
        leader_leo=10,
        now_ms=50_000,
        replica_lag_time_max_ms=LAG_MS,
        eligible_epochs=ELIGIBLE,
    )
    assert after.high_watermark == expected_hw
    if expected_hw == state.high_watermark:
        assert after is state


@pytest.mark.parametrize(
    "eligible",
    [
        pytest.param({1: 10, 2: 20}, id="fenced-or-shutting-down"),
        pytest.param({**ELIGIBLE, 3: 31}, id="progress-of-a-previous-incarnation"),
    ],
)
def test_advance_high_watermark_ignores_ineligible_joiners(eligible: dict[int, int]) -> None:
    state = leader(CommittedIsr(isr=frozenset({1, 2})), fp(2, 8), fp(3, 7, caught_up_ms=45_000))
    after = advance_high_watermark(
        state,
        leader_leo=10,
        now_ms=50_000,
        replica_lag_time_max_ms=LAG_MS,
        eligible_epochs=eligible,
    )
    assert after.high_watermark == 8


@pytest.mark.parametrize(
    ("leader_hw", "leo", "log_start", "expected"),
    [
        pytest.param(10, 12, 0, 10, id="leader-hw-below-leo"),
        pytest.param(10, 7, 0, 7, id="capped-by-own-leo"),
        pytest.param(2, 7, 4, 4, id="not-below-log-start"),
    ],
)
def test_follower_high_watermark(leader_hw: int, leo: int, log_start: int, expected: int) -> None:
    assert (
        follower_high_watermark(leader_hw=leader_hw, log_end_offset=leo, log_start_offset=log_start)
        == expected
    )


@pytest.mark.parametrize(
    ("isr_size", "min_isr", "expected"),
    [
        pytest.param(3, 2, True, id="above"),
        pytest.param(2, 2, True, id="equal"),
        pytest.param(1, 2, False, id="below-not-enough-replicas"),
    ],
)
def test_can_append_with_acks_all(isr_size: int, min_isr: int, expected: bool) -> None:
    assert can_append_with_acks_all(isr_size, min_isr) is expected


@pytest.mark.parametrize(
    ("required", "hw", "isr_size", "leader_epoch", "outcome"),
    [
        pytest.param(10, 10, 2, 4, ProduceOutcome.COMPLETE, id="hw-covers-batch"),
        pytest.param(
            10, 12, 1, 4, ProduceOutcome.COMPLETE, id="covered-before-isr-shrank-is-committed"
        ),
        pytest.param(10, 9, 2, 4, ProduceOutcome.WAIT, id="not-yet-covered"),
        pytest.param(
            10,
            9,
            1,
            4,
            ProduceOutcome.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
            id="isr-dropped-while-waiting",
        ),
        pytest.param(10, 9, 2, None, ProduceOutcome.LEADERSHIP_CHANGED, id="no-longer-leader"),
        pytest.param(
            10,
            12,
            2,
            6,
            ProduceOutcome.LEADERSHIP_CHANGED,
            id="leader-again-in-a-newer-epoch-hw-passed-says-nothing",
        ),
    ],
)
def test_produce_outcome(
    required: int, hw: int, isr_size: int, leader_epoch: int | None, outcome: ProduceOutcome
) -> None:
    assert (
        produce_outcome(
            required_offset=required,
            high_watermark=hw,
            isr_size=isr_size,
            min_isr=2,
            appended_leader_epoch=4,
            leader_epoch=leader_epoch,
        )
        is outcome
    )


@pytest.mark.parametrize(
    ("hw", "epoch_start", "available"),
    [
        pytest.param(10, 10, True, id="hw-at-epoch-start"),
        pytest.param(12, 10, True, id="hw-past-epoch-start"),
        pytest.param(8, 10, False, id="new-leader-hw-lags-its-predecessors"),
    ],
)
def test_latest_offset_available(hw: int, epoch_start: int, available: bool) -> None:
    assert (
        latest_offset_available(high_watermark=hw, leader_epoch_start_offset=epoch_start)
        is available
    )
