"""Replicas a broker reports offline (KAFKA_STORAGE_ERROR) leave the ISR and leadership."""

from __future__ import annotations

import pytest

from controller.election import ElectionMode, UncleanRecoveryStrategy
from controller.model import NO_LEADER, PartitionRegistration
from controller.offline_replicas import offline_replica_change, offline_replica_records
from controller.partition_change import ElectionPolicy
from controller.records import PartitionRecord
from tests.unit.controller.controller_harness import Harness


def _part(
    leader: int, isr: tuple[int, ...], replicas: tuple[int, ...] = (1, 2, 3)
) -> PartitionRegistration:
    return PartitionRegistration(
        replicas=replicas, leader=leader, isr=isr, leader_epoch=4, partition_epoch=9
    )


@pytest.mark.parametrize(
    ("current", "broker_id", "mode", "leader", "isr"),
    [
        pytest.param(
            _part(1, (1, 2, 3)), 1, ElectionMode.ONLINE, 2, (2, 3), id="leader-offline-moves"
        ),
        pytest.param(
            _part(1, (1, 2, 3)), 3, ElectionMode.ONLINE, 1, (1, 2), id="follower-leaves-isr"
        ),
        pytest.param(
            _part(1, (1,)), 1, ElectionMode.ONLINE, NO_LEADER, (1,), id="last-member-kept-offline"
        ),
        pytest.param(
            _part(1, (1,)), 1, ElectionMode.UNCLEAN, 2, (2,), id="unclean-allowed-elects-other"
        ),
        pytest.param(
            _part(2, (2, 3)), 1, ElectionMode.ONLINE, None, None, id="not-in-isr-no-change"
        ),
        pytest.param(
            _part(1, (1, 2), (1, 2)), 3, ElectionMode.ONLINE, None, None, id="not-a-replica"
        ),
    ],
)
def test_offline_replica_change(
    current: PartitionRegistration,
    broker_id: int,
    mode: ElectionMode,
    leader: int | None,
    isr: tuple[int, ...] | None,
) -> None:
    change = offline_replica_change(
        current,
        broker_id=broker_id,
        alive={1, 2, 3},
        policy=ElectionPolicy(
            min_insync_replicas=1, unclean_strategy=UncleanRecoveryStrategy.FIRST_ALIVE
        ),
        mode=mode,
    )
    if leader is None:
        assert change is None
        return
    assert change is not None
    assert (change.registration.leader, change.registration.isr) == (leader, isr)
    assert change.registration.partition_epoch == current.partition_epoch + 1
    if leader != current.leader:
        assert change.registration.leader_epoch == current.leader_epoch + 1


def test_reports_apply_only_to_the_current_incarnation() -> None:
    harness = Harness()
    harness.start_brokers(1, 2, 3)
    harness.create("t", rf=3)
    key = ("t", 0)
    leader = harness.part(key).leader
    epoch = harness.state.brokers[leader].broker_epoch
    stale = offline_replica_records(
        harness.state,
        broker_id=leader,
        broker_epoch=epoch - 1,
        keys=[key],
        default_min_insync_replicas=1,
        default_unclean_leader_election=False,
    )
    assert stale == []
    records = offline_replica_records(
        harness.state,
        broker_id=leader,
        broker_epoch=epoch,
        keys=[key, ("ghost", 0)],
        default_min_insync_replicas=1,
        default_unclean_leader_election=False,
    )
    assert len(records) == 1
    record = records[0]
    assert isinstance(record, PartitionRecord)
    assert record.registration.leader not in (leader, NO_LEADER)
    assert leader not in record.registration.isr


def test_an_offline_replica_is_not_eligible() -> None:
    """Its log cannot be opened: it leaves the ISR (not as the last member) and is never
    an eligible leader replica, even when the ISR falls below min.insync.replicas."""
    change = offline_replica_change(
        _part(1, (1, 3)),
        broker_id=3,
        alive={1, 2, 3},
        policy=ElectionPolicy(min_insync_replicas=2),
        mode=ElectionMode.ONLINE,
    )
    assert change is not None
    assert (change.registration.isr, change.registration.elr) == ((1,), ())
    assert change.registration.last_known_elr == (3,)
