"""LeaderAndIsr decisions with epoch fencing, state construction, StopReplica, request fencing."""

from __future__ import annotations

import msgspec
import pytest

from broker.replica.state import (
    NO_LEADER,
    UNKNOWN,
    CommittedIsr,
    FollowerProgress,
    FollowerState,
    LeaderState,
    OfflineState,
    PendingShrinkIsr,
    ReplicaRole,
    ReplicaState,
)
from broker.replica.transitions import (
    BecomeFollower,
    BecomeLeader,
    Ignore,
    IgnoreReason,
    LeaderAndIsrPartition,
    PartitionDecision,
    UpdateIsr,
    apply_leader_isr_update,
    check_control_request,
    check_controller_epoch,
    check_leader_epoch,
    check_partition_access,
    check_replica_fetch_epoch,
    check_stop_replica,
    decide_partition_update,
    new_follower_state,
    new_leader_state,
    stopped_state,
)
from minikafka.errors import ErrorCode

ME = 1


def update(
    *,
    leader: int = ME,
    leader_epoch: int = 5,
    partition_epoch: int = 10,
    isr: frozenset[int] = frozenset({1, 2, 3}),
    replicas: tuple[int, ...] = (1, 2, 3),
) -> LeaderAndIsrPartition:
    return LeaderAndIsrPartition(
        topic="t",
        partition=0,
        leader=leader,
        leader_epoch=leader_epoch,
        partition_epoch=partition_epoch,
        isr=isr,
        replicas=replicas,
    )


def leading(*, leader_epoch: int = 5, partition_epoch: int = 10) -> LeaderState:
    return new_leader_state(
        update(leader_epoch=leader_epoch, partition_epoch=partition_epoch),
        previous=OfflineState(topic="t", partition=0),
        log_end_offset=40,
        high_watermark=30,
        min_insync_replicas=2,
        now_ms=1000,
    )


def following(
    leader: int = 2, *, leader_epoch: int = 5, partition_epoch: int = 10
) -> FollowerState:
    return new_follower_state(
        update(leader=leader, leader_epoch=leader_epoch, partition_epoch=partition_epoch)
    )


UNSEEN = OfflineState(topic="t", partition=0)
STOPPED = OfflineState(topic="t", partition=0, leader_epoch=5, partition_epoch=10)


def ignore(reason: IgnoreReason, code: ErrorCode) -> Ignore:
    return Ignore(reason=reason, error_code=code)


@pytest.mark.parametrize(
    ("current", "incoming", "expected"),
    [
        pytest.param(UNSEEN, update(), "leader", id="unseen-becomes-leader"),
        pytest.param(UNSEEN, update(leader=2), "follower", id="unseen-becomes-follower"),
        pytest.param(
            UNSEEN, update(leader=NO_LEADER), "follower", id="no-leader-follower-without-fetching"
        ),
        pytest.param(
            UNSEEN,
            update(replicas=(2, 3)),
            ignore(IgnoreReason.NOT_A_REPLICA, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
            id="not-in-assignment",
        ),
        pytest.param(
            leading(),
            update(leader_epoch=4, partition_epoch=99),
            ignore(IgnoreReason.STALE_LEADER_EPOCH, ErrorCode.STALE_CONTROLLER_EPOCH),
            id="lower-leader-epoch",
        ),
        pytest.param(
            following(),
            update(leader=2, partition_epoch=9),
            ignore(IgnoreReason.STALE_PARTITION_EPOCH, ErrorCode.STALE_CONTROLLER_EPOCH),
            id="same-leader-epoch-older-partition-epoch",
        ),
        pytest.param(
            following(),
            update(leader=2),
            ignore(IgnoreReason.ALREADY_APPLIED, ErrorCode.NONE),
            id="duplicate-is-acknowledged",
        ),
        pytest.param(leading(), update(partition_epoch=11), "update", id="leader-isr-change"),
        pytest.param(
            following(), update(leader=2, partition_epoch=11), "update", id="follower-isr-change"
        ),
        pytest.param(
            following(),
            update(leader=3, partition_epoch=11),
            ignore(IgnoreReason.LEADER_CHANGED_WITHOUT_EPOCH_BUMP, ErrorCode.INVALID_REQUEST),
            id="other-leader-same-epoch",
        ),
        pytest.param(
            leading(),
            update(leader=2, partition_epoch=11),
            ignore(IgnoreReason.LEADER_CHANGED_WITHOUT_EPOCH_BUMP, ErrorCode.INVALID_REQUEST),
            id="leader-demoted-same-epoch",
        ),
        pytest.param(
            STOPPED, update(partition_epoch=11), "leader", id="stopped-restarts-same-epoch"
        ),
        pytest.param(
            leading(), update(leader_epoch=6, leader=2), "follower", id="leader-to-follower"
        ),
        pytest.param(following(), update(leader_epoch=6), "leader", id="follower-to-leader"),
        pytest.param(leading(), update(leader_epoch=6), "leader", id="leader-re-elected-new-epoch"),
        pytest.param(
            following(2),
            update(leader_epoch=6, leader=2, partition_epoch=3),
            "follower",
            id="kafka-7164-same-leader-new-epoch-re-truncates",
        ),
    ],
)
def test_decide_partition_update(
    current: ReplicaState, incoming: LeaderAndIsrPartition, expected: Ignore | str
) -> None:
    decision: PartitionDecision = decide_partition_update(current, incoming, local_broker_id=ME)
    match expected:
        case "leader":
            assert decision == BecomeLeader(update=incoming)
        case "follower":
            assert decision == BecomeFollower(update=incoming)
        case "update":
            assert decision == UpdateIsr(update=incoming)
        case _:
            assert decision == expected


# ---- state construction ----------------------------------------------------------------------


def test_new_leader_state_from_follower_forgets_follower_leos() -> None:
    state = new_leader_state(
        update(isr=frozenset({1, 2})),
        previous=following(),
        log_end_offset=40,
        high_watermark=30,
        min_insync_replicas=2,
        now_ms=1000,
    )
    assert state.role is ReplicaRole.LEADER
    assert (state.leader_id, state.leader_epoch, state.partition_epoch) == (ME, 5, 10)
    assert state.isr_state == CommittedIsr(isr=frozenset({1, 2}))
    assert state.leader_epoch_start_offset == 40
    assert state.high_watermark == 30
    assert state.followers == (
        FollowerProgress(broker_id=2, last_caught_up_time_ms=1000),  # in ISR: full lag window
        FollowerProgress(broker_id=3),  # not in ISR: not waited for
    )


def test_re_elected_leader_keeps_known_follower_leos() -> None:
    old = msgspec.structs.replace(
        leading(),
        followers=(FollowerProgress(broker_id=2, log_end_offset=38, last_caught_up_time_ms=900),),
    )
    state = new_leader_state(
        update(leader_epoch=6, replicas=(1, 2, 3)),
        previous=old,
        log_end_offset=40,
        high_watermark=30,
        min_insync_replicas=2,
        now_ms=2000,
    )
    assert state.followers == (
        FollowerProgress(
            broker_id=2,
            log_end_offset=38,
            last_caught_up_time_ms=2000,
            last_fetch_time_ms=2000,
            last_fetch_leader_leo=40,
        ),
        FollowerProgress(broker_id=3, last_caught_up_time_ms=2000),  # unknown before: fresh
    )


def test_apply_leader_isr_update_replaces_pending_change_and_assignment() -> None:
    state = msgspec.structs.replace(
        leading(),
        isr_state=PendingShrinkIsr(
            isr=frozenset({1, 2, 3}), removing=frozenset({3}), sent_partition_epoch=10
        ),
        followers=(FollowerProgress(broker_id=2, log_end_offset=39), FollowerProgress(broker_id=3)),
    )
    after = apply_leader_isr_update(
        state, update(partition_epoch=11, isr=frozenset({1, 2}), replicas=(1, 2, 4))
    )
    assert after.isr_state == CommittedIsr(isr=frozenset({1, 2}))
    assert after.partition_epoch == 11
    assert after.replicas == (1, 2, 4)
    assert after.followers == (
        FollowerProgress(broker_id=2, log_end_offset=39),
        FollowerProgress(broker_id=4),
    )


@pytest.mark.parametrize(
    "incoming",
    [
        pytest.param(update(leader=2, partition_epoch=11), id="other-leader"),
        pytest.param(update(leader_epoch=6), id="other-epoch"),
    ],
)
def test_apply_leader_isr_update_refuses_other_leadership(incoming: LeaderAndIsrPartition) -> None:
    with pytest.raises(ValueError, match="applied to leader 1 epoch 5"):
        apply_leader_isr_update(leading(), incoming)


def test_follower_and_offline_states() -> None:
    follower = following(3, leader_epoch=7, partition_epoch=12)
    assert follower.role is ReplicaRole.FOLLOWER
    assert (follower.leader_id, follower.leader_epoch, follower.partition_epoch) == (3, 7, 12)
    stopped = stopped_state(follower)
    assert stopped == OfflineState(topic="t", partition=0, leader_epoch=7, partition_epoch=12)
    assert stopped.role is ReplicaRole.OFFLINE
    assert stopped.leader_id == NO_LEADER


# ---- fencing -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("requested", "expected"),
    [
        pytest.param(-2, None, id="during-delete-skips"),
        pytest.param(UNKNOWN, None, id="no-epoch-skips"),
        pytest.param(4, ErrorCode.FENCED_LEADER_EPOCH, id="older"),
        pytest.param(5, None, id="current"),
        pytest.param(6, None, id="newer"),
    ],
)
def test_check_stop_replica(requested: int, expected: ErrorCode | None) -> None:
    assert check_stop_replica(following(), requested) == expected


@pytest.mark.parametrize(
    ("requested", "expected"),
    [
        pytest.param(3, ErrorCode.STALE_CONTROLLER_EPOCH, id="older"),
        pytest.param(4, None, id="current"),
        pytest.param(5, None, id="newer"),
    ],
)
def test_check_controller_epoch(requested: int, expected: ErrorCode | None) -> None:
    assert check_controller_epoch(requested, 4) == expected


@pytest.mark.parametrize(
    ("requested", "expected"),
    [
        pytest.param(UNKNOWN, None, id="minus-one-skips"),
        pytest.param(5, None, id="current"),
        pytest.param(4, ErrorCode.FENCED_LEADER_EPOCH, id="older-fenced"),
        pytest.param(6, ErrorCode.UNKNOWN_LEADER_EPOCH, id="newer-unknown"),
    ],
)
def test_check_leader_epoch(requested: int, expected: ErrorCode | None) -> None:
    assert check_leader_epoch(requested, 5) == expected


@pytest.mark.parametrize(
    ("state", "requested", "require_leader", "expected"),
    [
        pytest.param(leading(), 5, True, None, id="leader-produce"),
        pytest.param(leading(), UNKNOWN, True, None, id="leader-no-epoch"),
        pytest.param(leading(), 4, True, ErrorCode.FENCED_LEADER_EPOCH, id="leader-older-epoch"),
        pytest.param(leading(), 6, True, ErrorCode.UNKNOWN_LEADER_EPOCH, id="leader-newer-epoch"),
        pytest.param(following(), 5, True, ErrorCode.NOT_LEADER_OR_FOLLOWER, id="follower-produce"),
        pytest.param(
            following(), 4, True, ErrorCode.FENCED_LEADER_EPOCH, id="epoch-checked-before-role"
        ),
        pytest.param(following(), 5, False, None, id="follower-consumer-fetch-kip392"),
        pytest.param(STOPPED, 5, False, ErrorCode.NOT_LEADER_OR_FOLLOWER, id="offline"),
    ],
)
def test_check_partition_access(
    state: ReplicaState, requested: int, require_leader: bool, expected: ErrorCode | None
) -> None:
    got = check_partition_access(
        state, requested_leader_epoch=requested, require_leader=require_leader
    )
    assert got == expected


@pytest.mark.parametrize(
    ("controller_epoch", "broker_epoch", "current", "expected"),
    [
        pytest.param(4, 8, 8, None, id="this-incarnation-current-controller"),
        pytest.param(5, 8, 8, None, id="newer-controller-announced-by-the-session"),
        pytest.param(4, 5, -1, ErrorCode.STALE_BROKER_EPOCH, id="not-registered-yet"),
        pytest.param(4, -1, -1, ErrorCode.STALE_BROKER_EPOCH, id="not-registered-no-epoch"),
        pytest.param(4, -1, 8, ErrorCode.STALE_BROKER_EPOCH, id="request-without-broker-epoch"),
        pytest.param(4, 5, 8, ErrorCode.STALE_BROKER_EPOCH, id="previous-incarnation"),
        pytest.param(3, 8, 8, ErrorCode.STALE_CONTROLLER_EPOCH, id="older-controller"),
        pytest.param(6, 8, 8, ErrorCode.NOT_CONTROLLER, id="controller-epoch-never-announced"),
    ],
)
def test_check_control_request(
    controller_epoch: int, broker_epoch: int, current: int, expected: ErrorCode | None
) -> None:
    assert (
        check_control_request(
            controller_epoch=controller_epoch,
            broker_epoch=broker_epoch,
            current_broker_epoch=current,
            seen_controller_epoch=4,
            session_controller_epoch=5,
        )
        == expected
    )


@pytest.mark.parametrize(
    ("controller_epoch", "broker_epoch", "current", "expected"),
    [
        pytest.param(6, 5, -1, None, id="not-registered-any-epoch-applied"),
        pytest.param(4, -1, -1, None, id="not-registered-no-epoch-applied"),
        pytest.param(3, 5, -1, ErrorCode.STALE_CONTROLLER_EPOCH, id="not-registered-old-ctrl"),
        pytest.param(4, -1, 8, None, id="registered-request-without-epoch-applied"),
        pytest.param(4, 5, 8, ErrorCode.STALE_BROKER_EPOCH, id="registered-other-incarnation"),
        pytest.param(6, 8, 8, ErrorCode.NOT_CONTROLLER, id="registered-epoch-never-announced"),
    ],
)
def test_check_control_request_before_the_fix(
    controller_epoch: int, broker_epoch: int, current: int, expected: ErrorCode | None
) -> None:
    """The test-only pre-fix rule of hole 2 (the simulator's canary)."""
    assert (
        check_control_request(
            controller_epoch=controller_epoch,
            broker_epoch=broker_epoch,
            current_broker_epoch=current,
            seen_controller_epoch=4,
            session_controller_epoch=5,
            unsafe_before_registration=True,
        )
        == expected
    )


@pytest.mark.parametrize(
    ("requested", "known", "served"),
    [
        pytest.param(7, 7, True, id="current-incarnation"),
        pytest.param(8, 7, True, id="newer-than-the-metadata-shows"),
        pytest.param(6, 7, False, id="zombie-previous-incarnation"),
        pytest.param(-1, 7, False, id="follower-not-registered"),
        pytest.param(-1, None, False, id="unknown-follower-not-registered"),
        pytest.param(3, None, True, id="follower-the-metadata-does-not-show-yet"),
    ],
)
def test_check_replica_fetch_epoch(requested: int, known: int | None, served: bool) -> None:
    assert check_replica_fetch_epoch(requested, known) is served
