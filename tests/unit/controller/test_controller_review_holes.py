"""Adversarial review of issues 14/15 on the controller's pure handlers (findings, xfail).

Each test drives the real handlers (`register_broker`, `alter_configs`, `alter_partition`,
`fence_broker`, `heartbeat`) through one schedule, with the model of what each broker's log
holds from `test_controller_elr_property` (a write is committed on the ISR the *leader*
uses), and asserts the safety property: no election that is not called unclean picks a
leader missing a committed record. A strict xfail marks a hole that the schedule proves.
"""

from __future__ import annotations

import pytest

from controller.election import UncleanRecoveryStrategy
from controller.model import NO_LEADER
from controller.partition_change import ElectionKind
from controller.state_machine import (
    AlterPartitionItem,
    Settings,
    alter_configs,
    alter_partition,
    fence_broker,
    register_broker,
)
from minikafka.errors import ErrorCode
from tests.unit.controller.controller_harness import Harness

KEY = ("t", 0)
SETTINGS = Settings(unclean_recovery_strategy=UncleanRecoveryStrategy.FIRST_ALIVE)


def _set_config(h: Harness, name: str, value: str) -> None:
    reply = h.commit(
        alter_configs(
            h.state,
            h.settings,
            topic="t",
            set_configs={name: value},
            delete_configs=(),
            validate_only=False,
        )
    )
    assert reply.error is ErrorCode.NONE, reply


def _alter(h: Harness, new_isr: set[int], *, leader_min_isr: int = 0) -> None:
    """The leader's AlterPartition to `new_isr`, each member fetching in its current epoch
    (`leader_min_isr`: the min.insync.replicas the leader applies; 0: not given)."""
    part = h.part(KEY)
    reply = h.commit(
        alter_partition(
            h.state,
            h.settings,
            broker_id=part.leader,
            broker_epoch=h.state.brokers[part.leader].broker_epoch,
            items=[
                AlterPartitionItem(
                    topic="t",
                    partition=0,
                    leader_epoch=part.leader_epoch,
                    partition_epoch=part.partition_epoch,
                    new_isr=tuple(sorted(new_isr)),
                    member_epochs={m: h.state.brokers[m].broker_epoch for m in new_isr},
                    leader_min_insync_replicas=leader_min_isr,
                )
            ],
        )
    )
    (result,) = reply.items
    assert result.error is ErrorCode.NONE, result


def _shrink(h: Harness, removing: int, *, leader_min_isr: int = 0) -> None:
    _alter(h, set(h.part(KEY).isr) - {removing}, leader_min_isr=leader_min_isr)


def _fence(h: Harness, broker_id: int) -> None:
    h.commit(fence_broker(h.state, h.settings, broker_id=broker_id, reason="review"))


FSYNC_HOLE = "hole: flush.policy=fsync is applied retroactively to records written before it"


@pytest.mark.parametrize(
    "switch_to_fsync",
    [False, pytest.param(True, marks=pytest.mark.xfail(strict=True, reason=FSYNC_HOLE))],
)
def test_switching_flush_policy_to_fsync_does_not_excuse_an_earlier_unflushed_tail(
    switch_to_fsync: bool,
) -> None:
    """`_replica_loss` treats an unclean restart as losing nothing when the topic's *current*
    flush.policy is fsync ("every offset below the HW was fsynced"). That holds only for
    records written after every replica applied the policy: `Partition.update_settings`
    does not flush the existing log, and flush.ms defaults to never, so records committed
    under flush.policy=none stay in the page cache indefinitely. Schedule (R22 with one
    config change): replicas a, b, c, min ISR 2; c leaves the ISR; 5 records are
    committed on {a, b} (not fsynced); the operator sets flush.policy=fsync; a crashes
    (fenced: ISR {b}, ELR {a}); b loses power, loses its unflushed tail and registers
    without a clean-shutdown proof. The controller keeps b in the ISR as if intact; b
    unfences and is elected cleanly (from the ISR) holding 0 of 5 committed records; a
    and c then truncate to it. Fix: record, per topic, the metadata offset at which
    flush.policy became fsync and excuse only replicas whose broker registered after it
    (or simply drop the fsync excuse for UNFLUSHED restarts: under fsync the ELR member
    that restarts keeps everything anyway, the excuse only buys availability)."""
    h = Harness(SETTINGS)
    h.start_brokers(1, 2, 3)
    h.create("t", rf=3, configs={"min.insync.replicas": "2"})
    part = h.part(KEY)
    a = part.leader
    b, c = (r for r in part.replicas if r != a)
    _shrink(h, c)
    holds = {a: 5, b: 5, c: 0}  # 5 records committed on ISR {a, b}, flush.policy=none
    committed = 5
    if switch_to_fsync:  # False: the control, the same schedule without the change
        _set_config(h, "flush.policy", "fsync")
    _fence(h, a)
    assert h.part(KEY).isr == (b,)
    _fence(h, b)  # b loses power ...
    holds[b] = 0  # ... and with it the tail it never fsynced
    before = len(h.elections)
    h.register(b, clean_shutdown=False)
    h.unfence(b)
    elected = [e for e in h.elections[before:] if e.kind is not ElectionKind.UNCLEAN]
    assert h.part(KEY).leader in (NO_LEADER, a)
    assert not elected, f"clean election of {b} holding {holds[b]} of {committed}"


@pytest.mark.parametrize("raise_min_isr", [False, True])
def test_raising_min_insync_replicas_makes_a_lagging_replica_eligible(
    raise_min_isr: bool,
) -> None:
    """ELR's premise is that the leader's HW stops while |ISR| < min.insync.replicas. The
    controller populates the ELR with its *new* minimum as soon as alter_configs is
    journaled, while the leader applies the new minimum only when the metadata reaches it
    (`Partition.update_settings`): in between, the HW still advances on the old one.
    Schedule: replicas a, b, c, min ISR 2, ISR {a, b, c}. The operator raises min ISR to 3.
    Before the UpdateMetadata reaches a, a's lag timer shrinks the lagging c: AlterPartition
    {a, b} is accepted and, since 2 < 3, c joins the ELR. a (min ISR 2, committed ISR {a,
    b}) acknowledges 5 acks=all records on a and b. a crashes (b leads), then b crashes: c,
    alive all along, is elected from the ELR (a clean ELIGIBLE election) holding none of the
    5, and a and b truncate to it when they return. Fix: the leader states the
    min.insync.replicas it applies in each AlterPartition item and the controller populates
    the ELR with the smaller of the two (or refuses a shrink from a leader on an older
    minimum until it has the metadata); for controller-side removals the stale leader's view
    still includes the removed member, so those are safe.

    Fixed: AlterPartition carries `leader_min_insync_replicas` and the controller keeps the
    ELR with the smaller minimum (`state_machine._leader_policy`)."""
    h = Harness(SETTINGS)
    h.start_brokers(1, 2, 3)
    h.create("t", rf=3, configs={"min.insync.replicas": "2"})
    part = h.part(KEY)
    a = part.leader
    b, c = (r for r in part.replicas if r != a)
    holds = {a: 3, b: 3, c: 3}  # committed on the full ISR
    leader_min_isr = 2  # what a applies until the metadata with the new config arrives
    if raise_min_isr:  # False: the control, the same schedule without the change
        _set_config(h, "min.insync.replicas", "3")
    _shrink(h, c, leader_min_isr=leader_min_isr)  # sent by a, which still applies min ISR 2
    assert set(h.part(KEY).isr) == {a, b}
    assert len(h.part(KEY).isr) >= leader_min_isr  # a's HW advances on {a, b}
    holds[a] = holds[b] = committed = 8
    _fence(h, a)  # b leads from the ISR
    _fence(h, b)  # the ISR is empty; c, alive all along, is eligible
    part = h.part(KEY)
    assert part.leader != c, (
        f"clean election of {c} from ELR holding {holds[c]} of {committed} committed records"
    )


def _register(h: Harness, broker_id: int, *, previous_broker_epoch: int) -> None:
    reply = h.commit(
        register_broker(
            h.state,
            h.settings,
            broker_id=broker_id,
            host="127.0.0.1",
            port=9000 + broker_id,
            rack="",
            incarnation_id=f"incarnation-{broker_id}-{h.state.metadata_offset}",
            previous_broker_epoch=previous_broker_epoch,
            directory_id=f"dir-{broker_id}",
            session_alive=False,
        )
    )
    assert reply.error is ErrorCode.NONE, reply


@pytest.mark.parametrize("flush_policy", ["none", "fsync"])
def test_a_directory_rolled_back_to_an_older_clean_shutdown_is_never_taken_as_intact(
    flush_policy: str,
) -> None:
    """`restart_loss` files "restarted claiming broker epoch N, not its last
    registration's M" under UNFLUSHED, the same bucket as "no proof", and `_replica_loss`
    turns UNFLUSHED into NONE for flush.policy=fsync topics. But a proof of an *older*
    registration is what a data directory rolled back in time presents (restored from a
    backup or a VM snapshot taken after a clean shutdown; same directory.id, a genuine
    clean-shutdown file): it may miss every record since, fsynced or not. Schedule
    (flush.policy=fsync, replicas a, b, c, min ISR 2): b stops cleanly at epoch e1 and
    its directory is backed up; b returns (epoch e2); c leaves the ISR; 5 records are
    committed and fsynced on {a, b}; a crashes (b leads alone, a in the ELR); b's disk
    is replaced by the backup and b registers proving e1. The controller keeps b in the
    ISR; b unfences and is elected cleanly holding none of the 5, and a truncates to it
    when it returns. With flush.policy=none (the control) b leaves the ISR and the
    partition waits for a. Fix: in `restart_loss`, tell a stale proof (0 <= previous <
    the registration's epoch) from a missing one and never excuse it by flush policy
    (a crash between a registration and `record_incarnation` also presents one; counting
    it unclean costs availability only).

    Fixed: `restart_loss` answers `RestartLoss.STALE`, which no flush policy excuses."""
    h = Harness(SETTINGS)
    h.start_brokers(1, 2, 3)
    h.create("t", rf=3, configs={"min.insync.replicas": "2", "flush.policy": flush_policy})
    part = h.part(KEY)
    a = part.leader
    b, c = (r for r in part.replicas if r != a)
    _fence(h, b)  # b stops cleanly at epoch e1; its directory is backed up now
    backup_epoch = h.state.brokers[b].broker_epoch
    h.register(b, clean_shutdown=True)
    h.unfence(b)
    _alter(h, {a, b, c})  # b caught up: back in the ISR
    _shrink(h, c)
    holds = {a: 5, b: 5, c: 0}  # 5 records committed (and fsynced) on ISR {a, b}
    committed = 5
    _fence(h, a)
    assert h.part(KEY).isr == (b,)
    _fence(h, b)  # b's disk is replaced by the backup ...
    holds[b] = 0  # ... which holds none of the 5
    before = len(h.elections)
    _register(h, b, previous_broker_epoch=backup_epoch)
    h.unfence(b)
    elected = [e for e in h.elections[before:] if e.kind is not ElectionKind.UNCLEAN]
    assert not elected, f"clean election of {b} holding {holds[b]} of {committed}"
