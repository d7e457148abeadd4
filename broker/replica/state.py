"""Immutable replication state of one partition replica on this broker.

Pure data, no behaviour beyond derived properties: the async shell
(`broker/replica/partition.py`) holds the current value and swaps it for the one a
pure transition (`isr.py`, `high_watermark.py`, `transitions.py`) returns.

The ISR state is Kafka's closed family from `Partition.scala` (KIP-497):

- `CommittedIsr`: the ISR last committed by the controller; nothing in flight.
- `PendingExpandIsr`: an `AlterPartition` adding one replica is in flight. The new
  member already counts for the high watermark (the *maximal* ISR): adding a replica
  makes the HW more restrictive, so counting it early is safe whichever way the
  controller decides.
- `PendingShrinkIsr`: an `AlterPartition` removing replicas is in flight. The removed
  members keep counting (maximal ISR = committed ISR) until the controller commits,
  so an isolated leader can never shrink the ISR to itself and acknowledge alone.

Invariants kept by the transitions that build these values: the leader is always a
member of `isr`; `adding` is never in `isr`; `removing` is a non-empty subset of
`isr` without the leader; at most one change is in flight.
"""

from __future__ import annotations

import enum
from typing import Final

import msgspec

#: Offset or epoch that is not known (Kafka's `UNDEFINED_EPOCH` / `UnknownOffset`).
UNKNOWN: Final = -1
#: `leader` value of a partition that has no leader.
NO_LEADER: Final = -1


class ReplicaRole(enum.Enum):
    LEADER = "leader"
    FOLLOWER = "follower"
    OFFLINE = "offline"  # not served: unknown partition, stopped replica or offline log


class CommittedIsr(msgspec.Struct, frozen=True, kw_only=True, tag="committed"):
    """The controller-committed ISR; no change in flight."""

    isr: frozenset[int]

    @property
    def maximal_isr(self) -> frozenset[int]:
        return self.isr

    @property
    def is_inflight(self) -> bool:
        return False


class PendingExpandIsr(msgspec.Struct, frozen=True, kw_only=True, tag="pending_expand"):
    """An expand of the committed `isr` by `adding` is waiting for the controller."""

    isr: frozenset[int]
    adding: int
    #: The broker epoch `adding` fetched with when it was found in sync (KIP-903): the
    #: controller refuses the expand unless it is the broker's current registration.
    adding_broker_epoch: int
    sent_partition_epoch: int  # the partition epoch our AlterPartition proposal was based on

    @property
    def maximal_isr(self) -> frozenset[int]:
        # The new member counts for the HW at once: a larger ISR is more restrictive.
        return self.isr | {self.adding}

    @property
    def is_inflight(self) -> bool:
        return True

    @property
    def proposed_isr(self) -> frozenset[int]:
        return self.isr | {self.adding}


class PendingShrinkIsr(msgspec.Struct, frozen=True, kw_only=True, tag="pending_shrink"):
    """A shrink of the committed `isr` by `removing` is waiting for the controller."""

    isr: frozenset[int]
    removing: frozenset[int]
    sent_partition_epoch: int

    @property
    def maximal_isr(self) -> frozenset[int]:
        # A shrink counts only once committed (KIP-497): until then the old, larger ISR holds.
        return self.isr

    @property
    def is_inflight(self) -> bool:
        return True

    @property
    def proposed_isr(self) -> frozenset[int]:
        return self.isr - self.removing


IsrState = CommittedIsr | PendingExpandIsr | PendingShrinkIsr


class FollowerProgress(msgspec.Struct, frozen=True, kw_only=True):
    """What the leader knows of one follower (Kafka's `ReplicaState`).

    `log_end_offset` is the follower's last fetch offset (its LEO), `UNKNOWN` until it
    fetches from this leader. `last_fetch_leader_leo` is the leader's LEO when that
    fetch arrived; it drives the caught-up rule of `isr.update_follower_progress`.
    `broker_epoch` is the broker epoch (incarnation) those fetches came from (KIP-903):
    progress of one incarnation says nothing about the next, which may have restarted
    with a shorter log, so it is forgotten when the epoch changes, and a follower may
    join the ISR only on progress of the incarnation the metadata shows as current.
    """

    broker_id: int
    log_end_offset: int = UNKNOWN
    last_caught_up_time_ms: int = 0
    last_fetch_time_ms: int = 0
    last_fetch_leader_leo: int = UNKNOWN
    broker_epoch: int = UNKNOWN


class LeaderState(msgspec.Struct, frozen=True, kw_only=True):
    """This broker leads the partition in `leader_epoch`.

    `partition_epoch` is the last committed partition epoch known here (from
    LeaderAndIsr or an AlterPartition response). `followers` holds one entry per
    replica other than the leader, in `replicas` order. `leader_epoch_start_offset`
    is the leader's LEO when it became leader in this epoch: a follower must reach it
    before it may join the ISR (it then holds nothing from a diverging older epoch).
    """

    topic: str
    partition: int
    leader_id: int
    leader_epoch: int
    partition_epoch: int
    replicas: tuple[int, ...]
    isr_state: IsrState
    followers: tuple[FollowerProgress, ...]
    high_watermark: int
    min_insync_replicas: int
    leader_epoch_start_offset: int

    @property
    def role(self) -> ReplicaRole:
        return ReplicaRole.LEADER

    @property
    def isr(self) -> frozenset[int]:
        """The committed ISR (what acks=all admission and the HW freeze look at)."""
        return self.isr_state.isr

    @property
    def maximal_isr(self) -> frozenset[int]:
        return self.isr_state.maximal_isr

    def follower(self, broker_id: int) -> FollowerProgress | None:
        for progress in self.followers:
            if progress.broker_id == broker_id:
                return progress
        return None


class FollowerState(msgspec.Struct, frozen=True, kw_only=True):
    """This broker follows `leader_id` (or nobody, `NO_LEADER`) in `leader_epoch`."""

    topic: str
    partition: int
    leader_id: int
    leader_epoch: int
    partition_epoch: int
    replicas: tuple[int, ...]
    isr: frozenset[int]

    @property
    def role(self) -> ReplicaRole:
        return ReplicaRole.FOLLOWER


class OfflineState(msgspec.Struct, frozen=True, kw_only=True):
    """Not served by this broker; keeps the last epochs seen so stale updates stay fenced.

    A replica this broker has never heard of is `OfflineState` with every epoch `UNKNOWN`.
    """

    topic: str
    partition: int
    leader_epoch: int = UNKNOWN
    partition_epoch: int = UNKNOWN

    @property
    def role(self) -> ReplicaRole:
        return ReplicaRole.OFFLINE

    @property
    def leader_id(self) -> int:
        return NO_LEADER


ReplicaState = LeaderState | FollowerState | OfflineState
