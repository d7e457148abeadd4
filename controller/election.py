"""PURE leader election: a function of (assignment, ISR, alive brokers, current leader, mode).

Modelled on Kafka's `PartitionChangeBuilder.electLeader`. "Alive" means acceptable as a
leader: registered, unfenced and not in controlled shutdown (the caller decides).

- ONLINE (clean): keep the current leader if it is still an alive ISR member, else the first
  alive ISR member in assignment order, else no leader.
- PREFERRED: the first assigned replica if it is an alive ISR member, else as ONLINE.
- UNCLEAN: as ONLINE; if no ISR member is alive, the first alive replica in assignment order,
  flagged `unclean` (the caller resets the ISR to [leader]: data loss is possible).
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Sequence

import msgspec

from controller.model import NO_LEADER


class ElectionMode(enum.Enum):
    ONLINE = "online"
    PREFERRED = "preferred"
    UNCLEAN = "unclean"


class ElectionResult(msgspec.Struct, frozen=True, kw_only=True):
    leader: int  # a broker id or NO_LEADER
    unclean: bool = False  # True: the leader is not from the ISR; its ISR must become [leader]


def elect_leader(
    *,
    assignment: Sequence[int],
    isr: Collection[int],
    alive: Collection[int],
    current_leader: int,
    mode: ElectionMode,
) -> ElectionResult:
    def eligible(broker_id: int) -> bool:
        return broker_id in isr and broker_id in alive

    if mode is ElectionMode.PREFERRED and assignment and eligible(assignment[0]):
        return ElectionResult(leader=assignment[0])
    if current_leader != NO_LEADER and eligible(current_leader):
        return ElectionResult(leader=current_leader)
    for broker_id in assignment:
        if eligible(broker_id):
            return ElectionResult(leader=broker_id)
    if mode is ElectionMode.UNCLEAN:
        for broker_id in assignment:
            if broker_id in alive:
                return ElectionResult(leader=broker_id, unclean=True)
    return ElectionResult(leader=NO_LEADER)
