"""Partition change table: epochs, ISR order, unclean reset, recovering, no-op."""

from __future__ import annotations

import pytest

from controller.election import ElectionMode
from controller.model import NO_LEADER, PartitionRegistration, PartitionStatus
from controller.partition_change import ElectionKind, build_partition_change

BASE = PartitionRegistration(
    replicas=(1, 2, 3), leader=1, leader_epoch=4, isr=(1, 2, 3), partition_epoch=7
)


def reg(
    *, leader: int, isr: tuple[int, ...], leader_epoch: int, partition_epoch: int, rec: bool = False
) -> PartitionRegistration:
    return PartitionRegistration(
        replicas=(1, 2, 3),
        leader=leader,
        isr=isr,
        leader_epoch=leader_epoch,
        partition_epoch=partition_epoch,
        recovering=rec,
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
        current, alive=alive, min_insync_replicas=min_isr, mode=mode, target_isr=target_isr
    )
    if expected is None:
        assert change is None
        return
    assert change is not None
    assert change.registration == expected
    assert change.election == kind


def test_mark_recovering_keeps_last_member() -> None:
    current = reg(leader=NO_LEADER, isr=(2,), leader_epoch=3, partition_epoch=3)
    change = build_partition_change(current, alive={1}, min_insync_replicas=1, mark_recovering=True)
    assert change is not None
    assert change.registration.isr == (2,)
    assert change.registration.recovering
    assert change.registration.leader_epoch == 3  # the leader did not change
    assert change.registration.status is PartitionStatus.OFFLINE  # leaderless wins


def test_status_derivation() -> None:
    assert BASE.status is PartitionStatus.ONLINE
    assert reg(leader=1, isr=(1,), leader_epoch=0, partition_epoch=0, rec=True).status is (
        PartitionStatus.RECOVERING
    )
    assert reg(leader=-1, isr=(1,), leader_epoch=0, partition_epoch=0).status is (
        PartitionStatus.OFFLINE
    )
