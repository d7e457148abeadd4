"""PURE partition change: the next `PartitionRegistration`, or None when nothing changes.

Modelled on Kafka's `PartitionChangeBuilder.build()` with eligible leader replicas
(KIP-966). Rules, each with its reason:

- The ISR, ELR and last known ELR are kept in assignment order, so equal sets compare equal.
- The leader is (re-)elected against the *new* ISR and the ELR (`election.elect_leader`),
  so a leader removed from the ISR or no longer alive is replaced in the same change.
- A leader elected from the ELR becomes the sole ISR member: it holds every committed
  record, the others it left the ISR with may not hold its later ones.
- An unclean election resets the ISR to [new leader] and empties both ELR sets (only that
  replica's log is now the truth) and marks the partition recovering.
- ELR upkeep (`policy.eligible_leader_replicas`), Kafka's `maybePopulateTargetElr`: once
  the new ISR has at least min.insync.replicas members, both sets are cleared; while it is
  smaller, every member of the old ISR or ELR that is not in the new ISR is eligible (the
  high watermark stopped when the ISR fell below the minimum, so each holds every committed
  record), except `unclean_shutdown` replicas (they restarted without proof that their log
  is whole), which move to the last known ELR with any earlier last known member that is
  not eligible again. Without ELR both sets stay empty.
- The ISR may become empty: with ELR, when its last member leaves (fenced: it is in the
  ELR now); always, when its last member restarted without proof that its log is intact.
- `recovering` is cleared by an ISR expand that brings |ISR| to min.insync.replicas.
- `leader_epoch` is bumped only when the leader changes (followers truncate by epoch on it);
  `partition_epoch` on every change (AlterPartition proposals are validated against it).
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Mapping, Sequence

import msgspec

from controller.election import (
    ElectionMode,
    ElectionResult,
    LogEnd,
    UncleanRecoveryStrategy,
    elect_leader,
)
from controller.model import NO_LEADER, PartitionRegistration


class ElectionKind(enum.Enum):
    CLEAN = "clean"
    PREFERRED = "preferred"
    ELIGIBLE = "eligible"  # from the ELR: clean, counted apart
    UNCLEAN = "unclean"


class ElectionPolicy(msgspec.Struct, frozen=True, kw_only=True):
    """A topic's settings that elections depend on."""

    min_insync_replicas: int
    eligible_leader_replicas: bool = True
    unclean_strategy: UncleanRecoveryStrategy = UncleanRecoveryStrategy.LONGEST_LOG


class PartitionChange(msgspec.Struct, frozen=True, kw_only=True):
    registration: PartitionRegistration
    election: ElectionKind | None = None  # set when a new leader (not NO_LEADER) was elected


def build_partition_change(
    current: PartitionRegistration,
    *,
    alive: Collection[int],
    policy: ElectionPolicy,
    mode: ElectionMode = ElectionMode.ONLINE,
    target_isr: Collection[int] | None = None,
    unclean_shutdown: Collection[int] = (),
    log_ends: Mapping[int, LogEnd] | None = None,
    mark_recovering: bool = False,
) -> PartitionChange | None:
    """The change, or None. `mark_recovering` (without ELR only): the old "last replica
    standing" rule for an unclean restart of the last ISR member."""
    replicas = current.replicas
    isr = _ordered(replicas, current.isr if target_isr is None else target_isr)
    elr_enabled = policy.eligible_leader_replicas
    eligible_now = (
        _ordered(replicas, set(current.elr) - set(unclean_shutdown)) if elr_enabled else ()
    )
    election = elect_leader(
        assignment=replicas,
        isr=isr,
        elr=eligible_now,
        alive=alive,
        current_leader=current.leader,
        mode=mode,
        strategy=policy.unclean_strategy,
        log_ends=log_ends,
    )
    leader = election.leader
    recovering = current.recovering or mark_recovering
    elr: tuple[int, ...]
    last_known: tuple[int, ...]
    if election.unclean:
        isr, elr, last_known = (leader,), (), ()
        recovering = True
    else:
        if election.from_elr:
            isr = (leader,)
        elif _is_expand(current.isr, isr) and len(isr) >= policy.min_insync_replicas:
            recovering = False
        elr, last_known = _eligible(current, isr, policy, unclean_shutdown)
    after = (leader, isr, recovering, elr, last_known)
    if after == (
        current.leader,
        current.isr,
        current.recovering,
        current.elr,
        current.last_known_elr,
    ):
        return None
    registration = msgspec.structs.replace(
        current,
        leader=leader,
        isr=isr,
        recovering=recovering,
        elr=elr,
        last_known_elr=last_known,
        leader_epoch=_next_leader_epoch(current, leader),
        partition_epoch=current.partition_epoch + 1,
    )
    return PartitionChange(registration=registration, election=_kind(current, election, mode))


def _eligible(
    current: PartitionRegistration,
    isr: tuple[int, ...],
    policy: ElectionPolicy,
    unclean_shutdown: Collection[int],
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(ELR, last known ELR) next to the new `isr` (Kafka's `maybePopulateTargetElr`)."""
    if not policy.eligible_leader_replicas or len(isr) >= policy.min_insync_replicas:
        return (), ()
    candidates = set(current.elr) | set(current.isr)
    elr = candidates - set(isr) - set(unclean_shutdown)
    last_known = (candidates | set(current.last_known_elr)) - set(isr) - elr
    return _ordered(current.replicas, elr), _ordered(current.replicas, last_known)


def clear_eligible(current: PartitionRegistration) -> PartitionRegistration | None:
    """The registration with both ELR sets cleared (min.insync.replicas changed: who was
    eligible under the old minimum says nothing under the new one), None if both are empty."""
    if not current.elr and not current.last_known_elr:
        return None
    return msgspec.structs.replace(
        current, elr=(), last_known_elr=(), partition_epoch=current.partition_epoch + 1
    )


def _ordered(replicas: Sequence[int], members: Collection[int]) -> tuple[int, ...]:
    assert set(members) <= set(replicas), f"{sorted(members)} outside replicas {replicas}"
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
    if election.from_elr:
        return ElectionKind.ELIGIBLE
    if mode is ElectionMode.PREFERRED and election.leader == current.replicas[0]:
        return ElectionKind.PREFERRED
    return ElectionKind.CLEAN
