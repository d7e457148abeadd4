"""Partition change tables: epochs, ISR order, unclean reset, recovering, no-op (without
eligible leader replicas: the rules every election shares), then the ELR transitions of
KIP-966 and the unclean recovery strategies."""

from __future__ import annotations

import pytest

from controller.election import ElectionMode, LogEnd, UncleanRecoveryStrategy
from controller.model import NO_LEADER, PartitionRegistration, PartitionStatus
from controller.partition_change import (
    ElectionKind,
    ElectionPolicy,
    build_partition_change,
    clear_eligible,
)

FIRST_ALIVE = UncleanRecoveryStrategy.FIRST_ALIVE
LONGEST_LOG = UncleanRecoveryStrategy.LONGEST_LOG


def without_elr(min_isr: int) -> ElectionPolicy:
    return ElectionPolicy(
        min_insync_replicas=min_isr, eligible_leader_replicas=False, unclean_strategy=FIRST_ALIVE
    )


BASE = PartitionRegistration(
    replicas=(1, 2, 3), leader=1, leader_epoch=4, isr=(1, 2, 3), partition_epoch=7
)


def reg(
    *,
    leader: int,
    isr: tuple[int, ...],
    leader_epoch: int,
    partition_epoch: int,
    rec: bool = False,
    elr: tuple[int, ...] = (),
    lke: tuple[int, ...] = (),
) -> PartitionRegistration:
    return PartitionRegistration(
        replicas=(1, 2, 3),
        leader=leader,
        isr=isr,
        leader_epoch=leader_epoch,
        partition_epoch=partition_epoch,
        recovering=rec,
        elr=elr,
        last_known_elr=lke,
    )


CASES = [
    # id, current, alive, mode, target_isr, min_isr, expected registration, election kind
    ("no change is None", BASE, {1, 2, 3}, ElectionMode.ONLINE, None, 1, None, None),
    ("same ISR reordered is None", BASE, {1, 2, 3}, ElectionMode.ONLINE, (3, 2, 1), 1, None, None),
    (
        "shrink keeps leader epoch",
        BASE, {1, 2, 3}, ElectionMode.ONLINE, (1, 2), 1,
        reg(leader=1, isr=(1, 2), leader_epoch=4, partition_epoch=8), None,
    ),
    (
        "expand ordered by assignment",
        reg(leader=2, isr=(2,), leader_epoch=1, partition_epoch=1), {1, 2, 3},
        ElectionMode.ONLINE, (3, 2, 1), 1,
        reg(leader=2, isr=(1, 2, 3), leader_epoch=1, partition_epoch=2), None,
    ),
    (
        "leader dies: new leader bumps both epochs",
        BASE, {2, 3}, ElectionMode.ONLINE, (2, 3), 1,
        reg(leader=2, isr=(2, 3), leader_epoch=5, partition_epoch=8), ElectionKind.CLEAN,
    ),
    (
        "last member leader dies: offline, ISR kept",
        reg(leader=1, isr=(1,), leader_epoch=4, partition_epoch=7), {2, 3},
        ElectionMode.ONLINE, None, 1,
        reg(leader=NO_LEADER, isr=(1,), leader_epoch=5, partition_epoch=8), None,
    ),
    (
        "unclean resets ISR and marks recovering",
        reg(leader=NO_LEADER, isr=(1,), leader_epoch=5, partition_epoch=8), {3},
        ElectionMode.UNCLEAN, None, 2,
        reg(leader=3, isr=(3,), leader_epoch=6, partition_epoch=9, rec=True), ElectionKind.UNCLEAN,
    ),
    (
        "preferred election",
        reg(leader=2, isr=(1, 2, 3), leader_epoch=5, partition_epoch=8), {1, 2, 3},
        ElectionMode.PREFERRED, None, 1,
        reg(leader=1, isr=(1, 2, 3), leader_epoch=6, partition_epoch=9), ElectionKind.PREFERRED,
    ),
    (
        "expand to min ISR clears recovering",
        reg(leader=3, isr=(3,), leader_epoch=6, partition_epoch=9, rec=True), {1, 2, 3},
        ElectionMode.ONLINE, (2, 3), 2,
        reg(leader=3, isr=(2, 3), leader_epoch=6, partition_epoch=10), None,
    ),
    (
        "expand below min ISR stays recovering",
        reg(leader=3, isr=(3,), leader_epoch=6, partition_epoch=9, rec=True), {1, 2, 3},
        ElectionMode.ONLINE, (2, 3), 3,
        reg(leader=3, isr=(2, 3), leader_epoch=6, partition_epoch=10, rec=True), None,
    ),
    (
        "shrink never clears recovering",
        reg(leader=3, isr=(2, 3), leader_epoch=6, partition_epoch=9, rec=True), {1, 2, 3},
        ElectionMode.ONLINE, (3,), 1,
        reg(leader=3, isr=(3,), leader_epoch=6, partition_epoch=10, rec=True), None,
    ),
    (
        "leader removed from ISR is replaced",
        BASE, {1, 2, 3}, ElectionMode.ONLINE, (2, 3), 1,
        reg(leader=2, isr=(2, 3), leader_epoch=5, partition_epoch=8), ElectionKind.CLEAN,
    ),
]  # fmt: skip


@pytest.mark.parametrize(
    ("current", "alive", "mode", "target_isr", "min_isr", "expected", "kind"),
    [pytest.param(*case[1:], id=case[0]) for case in CASES],
)
def test_partition_change_table(
    current: PartitionRegistration,
    alive: set[int],
    mode: ElectionMode,
    target_isr: tuple[int, ...] | None,
    min_isr: int,
    expected: PartitionRegistration | None,
    kind: ElectionKind | None,
) -> None:
    change = build_partition_change(
        current, alive=alive, policy=without_elr(min_isr), mode=mode, target_isr=target_isr
    )
    if expected is None:
        assert change is None
        return
    assert change is not None
    assert change.registration == expected
    assert change.election == kind


def test_an_empty_isr_elects_nobody_but_an_unclean_election() -> None:
    current = reg(leader=2, isr=(2,), leader_epoch=3, partition_epoch=3)
    change = build_partition_change(current, alive={1, 2}, policy=without_elr(1), target_isr=())
    assert change is not None
    assert (change.registration.leader, change.registration.isr) == (NO_LEADER, ())
    assert change.registration.status is PartitionStatus.OFFLINE
    unclean = build_partition_change(
        change.registration, alive={1}, policy=without_elr(1), mode=ElectionMode.UNCLEAN
    )
    assert unclean is not None
    assert (unclean.registration.leader, unclean.registration.isr) == (1, (1,))
    assert unclean.registration.recovering


# ---- eligible leader replicas (KIP-966) ---------------------------------------------------

ELR_CASES = [
    # id, current, alive, mode, target_isr, unclean_shutdown, expected, election kind
    (
        "isr at min isr: elr stays empty",
        BASE, {1, 2, 3}, ElectionMode.ONLINE, (1, 2), (),
        reg(leader=1, isr=(1, 2), leader_epoch=4, partition_epoch=8), None,
    ),
    (
        "shrink below min isr: the removed members become eligible",
        BASE, {1, 2, 3}, ElectionMode.ONLINE, (1,), (),
        reg(leader=1, isr=(1,), leader_epoch=4, partition_epoch=8, elr=(2, 3)), None,
    ),
    (
        "the fenced last member leaves the isr into the elr",
        reg(leader=1, isr=(1,), leader_epoch=4, partition_epoch=8, elr=(2, 3)), set(),
        ElectionMode.ONLINE, (), (),
        reg(leader=NO_LEADER, isr=(), leader_epoch=5, partition_epoch=9, elr=(1, 2, 3)), None,
    ),
    (
        "the fenced last member's leadership passes to an alive eligible replica",
        reg(leader=1, isr=(1,), leader_epoch=4, partition_epoch=8, elr=(2, 3)), {2, 3},
        ElectionMode.ONLINE, (), (),
        reg(leader=2, isr=(2,), leader_epoch=5, partition_epoch=9, elr=(1, 3)),
        ElectionKind.ELIGIBLE,
    ),
    (
        "an eligible replica leads alone when no isr member is alive",
        reg(leader=NO_LEADER, isr=(), leader_epoch=5, partition_epoch=9, elr=(1, 2)), {2},
        ElectionMode.ONLINE, None, (),
        reg(leader=2, isr=(2,), leader_epoch=6, partition_epoch=10, elr=(1,)),
        ElectionKind.ELIGIBLE,
    ),
    (
        "an unclean restart moves the member to the last known elr",
        reg(leader=NO_LEADER, isr=(), leader_epoch=5, partition_epoch=9, elr=(1, 2)), {1},
        ElectionMode.ONLINE, None, (1,),
        reg(leader=NO_LEADER, isr=(), leader_epoch=5, partition_epoch=10, elr=(2,), lke=(1,)),
        None,
    ),
    (
        "an uncleanly restarted isr member is not eligible either",
        reg(leader=2, isr=(1, 2), leader_epoch=5, partition_epoch=9), {2},
        ElectionMode.ONLINE, (2,), (1,),
        reg(leader=2, isr=(2,), leader_epoch=5, partition_epoch=10, lke=(1,)), None,
    ),
    (
        "the isr back at min isr clears both elr sets",
        reg(leader=3, isr=(3,), leader_epoch=6, partition_epoch=9, elr=(2,), lke=(1,)),
        {1, 2, 3}, ElectionMode.ONLINE, (2, 3), (),
        reg(leader=3, isr=(2, 3), leader_epoch=6, partition_epoch=10), None,
    ),
    (
        "an unclean election empties both elr sets",
        reg(leader=NO_LEADER, isr=(), leader_epoch=5, partition_epoch=9, lke=(1,)), {3},
        ElectionMode.UNCLEAN, None, (),
        reg(leader=3, isr=(3,), leader_epoch=6, partition_epoch=10, rec=True),
        ElectionKind.UNCLEAN,
    ),
    (
        "unclean mode still prefers an eligible replica (a clean choice)",
        reg(leader=NO_LEADER, isr=(), leader_epoch=5, partition_epoch=9, elr=(2,)), {2, 3},
        ElectionMode.UNCLEAN, None, (),
        reg(leader=2, isr=(2,), leader_epoch=6, partition_epoch=10), ElectionKind.ELIGIBLE,
    ),
    (
        "a fenced eligible replica is not elected",
        reg(leader=NO_LEADER, isr=(), leader_epoch=5, partition_epoch=9, elr=(2,)), {3},
        ElectionMode.ONLINE, None, (), None, None,
    ),
]  # fmt: skip


@pytest.mark.parametrize(
    ("current", "alive", "mode", "target_isr", "unclean_shutdown", "expected", "kind"),
    [pytest.param(*case[1:], id=case[0]) for case in ELR_CASES],
)
def test_eligible_leader_replicas_table(
    current: PartitionRegistration,
    alive: set[int],
    mode: ElectionMode,
    target_isr: tuple[int, ...] | None,
    unclean_shutdown: tuple[int, ...],
    expected: PartitionRegistration | None,
    kind: ElectionKind | None,
) -> None:
    change = build_partition_change(
        current,
        alive=alive,
        policy=ElectionPolicy(min_insync_replicas=2, unclean_strategy=FIRST_ALIVE),
        mode=mode,
        target_isr=target_isr,
        unclean_shutdown=unclean_shutdown,
    )
    if expected is None:
        assert change is None
        return
    assert change is not None
    assert change.registration == expected
    assert change.election == kind


OFFLINE = reg(leader=NO_LEADER, isr=(), leader_epoch=5, partition_epoch=9, lke=(1,))


@pytest.mark.parametrize(
    ("strategy", "log_ends", "leader"),
    [
        pytest.param(
            LONGEST_LOG,
            {
                2: LogEnd(last_epoch=4, log_end_offset=900),
                3: LogEnd(last_epoch=5, log_end_offset=10),
            },
            3,
            id="longest-log-a-newer-epoch-wins",
        ),
        pytest.param(
            LONGEST_LOG,
            {
                2: LogEnd(last_epoch=5, log_end_offset=90),
                3: LogEnd(last_epoch=5, log_end_offset=80),
            },
            2,
            id="longest-log-same-epoch-more-offsets-win",
        ),
        pytest.param(
            LONGEST_LOG, {3: LogEnd(last_epoch=1, log_end_offset=1)}, 3, id="only-surveyed-replicas"
        ),
        pytest.param(LONGEST_LOG, None, NO_LEADER, id="longest-log-without-a-survey-waits"),
        pytest.param(LONGEST_LOG, {}, NO_LEADER, id="longest-log-nobody-answered"),
        pytest.param(FIRST_ALIVE, None, 2, id="first-alive-in-assignment-order"),
    ],
)
def test_unclean_recovery_strategies(
    strategy: UncleanRecoveryStrategy, log_ends: dict[int, LogEnd] | None, leader: int
) -> None:
    change = build_partition_change(
        OFFLINE,
        alive={2, 3},
        policy=ElectionPolicy(min_insync_replicas=2, unclean_strategy=strategy),
        mode=ElectionMode.UNCLEAN,
        log_ends=log_ends,
    )
    if leader == NO_LEADER:
        assert change is None
        return
    assert change is not None
    assert change.registration.leader == leader
    assert change.election is ElectionKind.UNCLEAN


def test_without_elr_the_fenced_last_member_stays_in_the_isr() -> None:
    current = reg(leader=1, isr=(1,), leader_epoch=4, partition_epoch=8, elr=(2,))
    change = build_partition_change(current, alive={2, 3}, policy=without_elr(2))
    assert change is not None
    assert (change.registration.isr, change.registration.elr) == ((1,), ())


def test_clear_eligible() -> None:
    with_elr = reg(leader=1, isr=(1,), leader_epoch=4, partition_epoch=8, elr=(2,), lke=(3,))
    cleared = clear_eligible(with_elr)
    assert cleared is not None
    assert (cleared.elr, cleared.last_known_elr, cleared.partition_epoch) == ((), (), 9)
    assert clear_eligible(BASE) is None


def test_status_derivation() -> None:
    assert BASE.status is PartitionStatus.ONLINE
    assert reg(leader=1, isr=(1,), leader_epoch=0, partition_epoch=0, rec=True).status is (
        PartitionStatus.RECOVERING
    )
    assert reg(leader=-1, isr=(1,), leader_epoch=0, partition_epoch=0).status is (
        PartitionStatus.OFFLINE
    )
