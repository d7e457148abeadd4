"""PURE leader election: a function of (assignment, ISR, ELR, alive brokers, current leader,
mode, and, for an unclean election, what the alive replicas hold).

Modelled on Kafka's `PartitionChangeBuilder.electLeader` with eligible leader replicas
(KIP-966). "Alive" means acceptable as a leader: registered, unfenced and not in controlled
shutdown (the caller decides). The order, for every mode:

1. PREFERRED only: the first assigned replica if it is an alive ISR member.
2. The current leader if it is still an alive ISR member.
3. The first alive ISR member in assignment order.
4. The first alive ELR member in assignment order (`from_elr`: the caller makes it the
   sole ISR). An ELR member left the ISR while the ISR was below min.insync.replicas, when
   the high watermark stopped advancing, so it holds every committed record: a clean choice.
5. UNCLEAN only: an alive replica that may miss committed records (`unclean`: the caller
   resets ISR and ELR to the leader, and data loss is possible). Chosen by the recovery
   strategy: LONGEST_LOG takes the replica whose log is longest by (last leader epoch, log
   end offset) among those whose log was surveyed (`log_ends`; without a survey nobody is
   chosen, the caller surveys first); FIRST_ALIVE takes the first alive replica in
   assignment order (Kafka's behaviour).
6. Otherwise no leader.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Mapping, Sequence

import msgspec

from controller.model import NO_LEADER


class ElectionMode(enum.Enum):
    ONLINE = "online"
    PREFERRED = "preferred"
    UNCLEAN = "unclean"


class UncleanRecoveryStrategy(enum.Enum):
    """How an unclean election picks among replicas that may miss committed records."""

    LONGEST_LOG = "longest-log"
    FIRST_ALIVE = "first-alive"


class LogEnd(msgspec.Struct, frozen=True, kw_only=True):
    """What one replica's log holds: its last leader epoch and its log end offset, as the
    broker answered in registration `broker_epoch` (-1: not recorded)."""

    last_epoch: int
    log_end_offset: int
    broker_epoch: int = -1


class ElectionResult(msgspec.Struct, frozen=True, kw_only=True):
    leader: int  # a broker id or NO_LEADER
    unclean: bool = False  # True: not from ISR or ELR; ISR and ELR must become [leader], ()
    from_elr: bool = False  # True: an eligible leader replica; the ISR must become [leader]


def elect_leader(
    *,
    assignment: Sequence[int],
    isr: Collection[int],
    alive: Collection[int],
    current_leader: int,
    mode: ElectionMode,
    elr: Collection[int] = (),
    strategy: UncleanRecoveryStrategy = UncleanRecoveryStrategy.FIRST_ALIVE,
    log_ends: Mapping[int, LogEnd] | None = None,
) -> ElectionResult:
    def in_isr(broker_id: int) -> bool:
        return broker_id in isr and broker_id in alive

    if mode is ElectionMode.PREFERRED and assignment and in_isr(assignment[0]):
        return ElectionResult(leader=assignment[0])
    if current_leader != NO_LEADER and in_isr(current_leader):
        return ElectionResult(leader=current_leader)
    for broker_id in assignment:
        if in_isr(broker_id):
            return ElectionResult(leader=broker_id)
    for broker_id in assignment:
        if broker_id in elr and broker_id in alive:
            return ElectionResult(leader=broker_id, from_elr=True)
    if mode is ElectionMode.UNCLEAN:
        candidates = [b for b in assignment if b in alive]
        if strategy is UncleanRecoveryStrategy.FIRST_ALIVE and candidates:
            return ElectionResult(leader=candidates[0], unclean=True)
        surveyed = [b for b in candidates if log_ends is not None and b in log_ends]
        if strategy is UncleanRecoveryStrategy.LONGEST_LOG and surveyed:
            assert log_ends is not None
            longest = max(
                surveyed,
                key=lambda b: (log_ends[b].last_epoch, log_ends[b].log_end_offset),
            )
            return ElectionResult(leader=longest, unclean=True)
    return ElectionResult(leader=NO_LEADER)
