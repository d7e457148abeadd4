"""PURE partition change: the next `PartitionRegistration`, or None when nothing changes.

Modelled on Kafka's `PartitionChangeBuilder.build()`. Rules, each with its reason:

- The ISR is kept in assignment order, so equal sets compare equal.
- The leader is (re-)elected against the *new* ISR, so a leader removed from the ISR or no
  longer alive is replaced in the same change.
- An unclean election resets the ISR to [new leader] (only that replica's log is known to
  be whole) and marks the partition recovering.
- `recovering` is cleared by an ISR expand that brings |ISR| to min.insync.replicas.
- `leader_epoch` is bumped only when the leader changes (followers truncate by epoch on it);
  `partition_epoch` on every change (AlterPartition proposals are validated against it).
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Sequence

import msgspec

from controller.election import ElectionMode, ElectionResult, elect_leader
from controller.model import NO_LEADER, PartitionRegistration


class ElectionKind(enum.Enum):
    CLEAN = "clean"
    PREFERRED = "preferred"
    UNCLEAN = "unclean"


class PartitionChange(msgspec.Struct, frozen=True, kw_only=True):
    registration: PartitionRegistration
    election: ElectionKind | None = None  # set when a new leader (not NO_LEADER) was elected


def build_partition_change(
    current: PartitionRegistration,
    *,
    alive: Collection[int],
    min_insync_replicas: int,
    mode: ElectionMode = ElectionMode.ONLINE,
    target_isr: Collection[int] | None = None,
    mark_recovering: bool = False,
) -> PartitionChange | None:
    isr = _ordered(current.replicas, current.isr if target_isr is None else target_isr)
    assert isr, "an ISR is never empty: the last member stays in it"
    election = elect_leader(
        assignment=current.replicas,
        isr=isr,
        alive=alive,
        current_leader=current.leader,
        mode=mode,
    )
    leader = election.leader
    recovering = current.recovering or mark_recovering
    if election.unclean:
        isr = (leader,)
        recovering = True
    elif _is_expand(current.isr, isr) and len(isr) >= min_insync_replicas:
        recovering = False
    if (leader, isr, recovering) == (current.leader, current.isr, current.recovering):
        return None
    registration = msgspec.structs.replace(
        current,
        leader=leader,
        isr=isr,
        recovering=recovering,
        leader_epoch=_next_leader_epoch(current, leader),
        partition_epoch=current.partition_epoch + 1,
    )
    return PartitionChange(registration=registration, election=_kind(current, election, mode))


def _ordered(replicas: Sequence[int], members: Collection[int]) -> tuple[int, ...]:
    assert set(members) <= set(replicas), f"ISR {sorted(members)} outside replicas {replicas}"
    return tuple(replica for replica in replicas if replica in members)


def _is_expand(old_isr: Sequence[int], new_isr: Sequence[int]) -> bool:
    return len(new_isr) > len(old_isr)


def _next_leader_epoch(current: PartitionRegistration, leader: int) -> int:
    # A new leader (or losing the leader) starts a new epoch so that the old leader and
    # lagging followers are fenced and followers truncate to the epoch boundary.
    if leader != current.leader:
        return current.leader_epoch + 1
    return current.leader_epoch


def _kind(
    current: PartitionRegistration, election: ElectionResult, mode: ElectionMode
) -> ElectionKind | None:
    if election.leader in (current.leader, NO_LEADER):
        return None
    if election.unclean:
        return ElectionKind.UNCLEAN
    if mode is ElectionMode.PREFERRED and election.leader == current.replicas[0]:
        return ElectionKind.PREFERRED
    return ElectionKind.CLEAN
