"""PURE records of one consumer group, as the coordinator holds them (KIP-848).

Epochs:
- The **group epoch** grows whenever what the target assignment depends on changes: a
  member joins or leaves (or is fenced), a subscription changes, a subscribed topic's
  partition count changes.
- The **assignment epoch** is the group epoch the current target assignment was computed
  at; it catches up with the group epoch before any member is reconciled.
- A **member epoch** is the assignment epoch the member has converged to. It moves forward
  only once the member holds nothing it must give up (revoke before assign).

Ownership: a partition is *held* by a member while it is in the member's `assigned` or
`revoking` set. Held sets of the members of one group never overlap; that is the rule every
transition keeps (`membership.check_invariants` states it).

Member epochs on the wire, as in Kafka's ConsumerGroupHeartbeat: `JOIN_EPOCH` (0) joins or
rejoins, `LEAVE_EPOCH` (-1) leaves, `STATIC_LEAVE_EPOCH` (-2) leaves temporarily keeping
a static member's assignment until its session expires.
"""

from __future__ import annotations

import enum
from typing import NamedTuple

import msgspec

JOIN_EPOCH = 0
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2


class TopicPartition(NamedTuple):
    topic: str
    partition: int


class MemberState(enum.Enum):
    """Where a member is on its way to its target assignment (Kafka's MemberState)."""

    STABLE = "stable"  # holds exactly its target at the assignment epoch
    UNREVOKED_PARTITIONS = "unrevoked_partitions"  # must give up `revoking` first
    UNRELEASED_PARTITIONS = "unreleased_partitions"  # waits for others to give up some target


class GroupState(enum.Enum):
    """What `describe` shows (Kafka's ConsumerGroupState names)."""

    EMPTY = "Empty"
    RECONCILING = "Reconciling"
    STABLE = "Stable"


class GroupConfig(msgspec.Struct, frozen=True, kw_only=True):
    """The coordinator's group settings (Kafka's `group.consumer.*` broker configs)."""

    session_timeout_ms: int = 45_000
    min_session_timeout_ms: int = 1_000
    max_session_timeout_ms: int = 1_800_000
    heartbeat_interval_ms: int = 5_000
    max_size: int = 1_000
    default_assignor: str = "range"


class Member(msgspec.Struct, frozen=True, kw_only=True):
    member_id: str
    instance_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    member_epoch: int = JOIN_EPOCH
    previous_member_epoch: int = LEAVE_EPOCH
    state: MemberState = MemberState.STABLE
    subscribed_topics: frozenset[str] = frozenset()
    assigned: frozenset[TopicPartition] = frozenset()
    revoking: frozenset[TopicPartition] = frozenset()
    session_timeout_ms: int = 45_000
    rebalance_timeout_ms: int = 300_000
    session_deadline_ms: int = 0
    #: When a member in UNREVOKED_PARTITIONS is fenced unless it has revoked (-1: not revoking).
    revocation_deadline_ms: int = -1
    #: The server assignor this member asked for (None: no preference).
    server_assignor: str | None = None
    #: A static member that left with STATIC_LEAVE_EPOCH: keeps its assignment, consumes
    #: nothing, until its session expires or its instance id joins again.
    left_temporarily: bool = False

    @property
    def held(self) -> frozenset[TopicPartition]:
        """What nobody else may be given: assigned, or still being revoked."""
        return self.assigned | self.revoking


class Group(msgspec.Struct, frozen=True, kw_only=True):
    """One group. Never mutated: every transition returns a new value (`members` and
    `target` are read-only by convention, replaced whole)."""

    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    #: The assignor the target at `assignment_epoch` was computed with.
    assignor: str = "range"
    members: dict[str, Member] = msgspec.field(default_factory=dict)
    #: member id -> the partitions the assignor gave it at `assignment_epoch`.
    target: dict[str, frozenset[TopicPartition]] = msgspec.field(default_factory=dict)
    #: topic -> partition count, for the topics the members subscribe to, as last seen.
    partition_counts: dict[str, int] = msgspec.field(default_factory=dict)


class HeartbeatRequest(msgspec.Struct, frozen=True, kw_only=True):
    """One ConsumerGroupHeartbeat, in domain terms. `None` means "unchanged since my last
    heartbeat" (a join must carry `subscribed_topics`)."""

    member_id: str
    member_epoch: int
    instance_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topics: frozenset[str] | None = None
    owned: frozenset[TopicPartition] | None = None
    server_assignor: str | None = None
    session_timeout_ms: int | None = None
    rebalance_timeout_ms: int | None = None


class HeartbeatResult(msgspec.Struct, frozen=True, kw_only=True):
    error: int = 0  # a minikafka.errors.ErrorCode value; 0 is NONE
    message: str = ""
    member_id: str = ""
    member_epoch: int = LEAVE_EPOCH
    heartbeat_interval_ms: int = 0
    #: The full set the member may own now; None when the answer carries no assignment
    #: (an error, or a leave).
    assignment: frozenset[TopicPartition] | None = None


def group_state(group: Group) -> GroupState:
    if not group.members:
        return GroupState.EMPTY
    converged = all(
        m.state is MemberState.STABLE and m.member_epoch == group.assignment_epoch
        for m in group.members.values()
        if not m.left_temporarily
    )
    return GroupState.STABLE if converged else GroupState.RECONCILING
