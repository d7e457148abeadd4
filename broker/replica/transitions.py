"""LeaderAndIsr / StopReplica application and request fencing, as pure decisions.

Caller: `ReplicaManager` (the shell). For each partition of a LeaderAndIsr it calls
`decide_partition_update(current, update, local_broker_id=...)` and performs the
decision:

- `BecomeLeader`: assign `(update.leader_epoch, LEO)` in the epoch cache *first* (so a
  follower asking about any later epoch gets an answer, KIP-279), stop the fetcher,
  build the state with `new_leader_state`, then `high_watermark.advance_high_watermark`.
- `BecomeFollower`: stop leading, build `new_follower_state`, and reset the fetch state
  of this partition (fetch offset = local LEO, last fetched epoch = latest local epoch)
  against the new leader. Every fetch then carries `last_fetched_epoch`, so the leader
  answers with a diverging epoch and the follower truncates (`truncation.py`) before it
  appends anything in the new epoch. This happens on *every* leader epoch change, even
  when the leader is the same broker (KAFKA-7164: truncation is keyed on the epoch,
  not on leader identity).
- `UpdateIsr`: same leader epoch, newer partition epoch (an ISR or assignment change
  only): `apply_leader_isr_update` or `new_follower_state`; the fetcher keeps going.
- `Ignore`: answer `error_code` for that partition and change nothing.

Fencing rules (Kafka `ReplicaManager.becomeLeaderOrFollower`, `Partition.makeFollower`):
a lower leader epoch is stale; an equal leader epoch with a partition epoch not newer
than ours is a duplicate or stale (the AlterPartition response may have taught us the
epoch first); a broker not in the assignment ignores the update.
"""

from __future__ import annotations

import enum

import msgspec

from broker.replica.isr import forget_follower_progress, reset_follower_progress
from broker.replica.state import (
    UNKNOWN,
    CommittedIsr,
    FollowerProgress,
    FollowerState,
    LeaderState,
    OfflineState,
    ReplicaState,
)
from minikafka.errors import ErrorCode


class LeaderAndIsrPartition(msgspec.Struct, frozen=True, kw_only=True):
    """One partition of a LeaderAndIsr request (the proto's `PartitionState`, decoded)."""

    topic: str
    partition: int
    leader: int  # NO_LEADER (-1) when the partition has none
    leader_epoch: int
    partition_epoch: int
    isr: frozenset[int]
    replicas: tuple[int, ...]
    is_new: bool = False
    recovering: bool = False  # elected uncleanly (state RECOVERING, KIP-704)


class BecomeLeader(msgspec.Struct, frozen=True, kw_only=True, tag="become_leader"):
    update: LeaderAndIsrPartition


class BecomeFollower(msgspec.Struct, frozen=True, kw_only=True, tag="become_follower"):
    """Follow `update.leader` (fetch nothing while it is NO_LEADER); always re-truncate."""

    update: LeaderAndIsrPartition


class UpdateIsr(msgspec.Struct, frozen=True, kw_only=True, tag="update_isr"):
    update: LeaderAndIsrPartition


class IgnoreReason(enum.Enum):
    NOT_A_REPLICA = "this broker is not in the partition's assignment"
    STALE_LEADER_EPOCH = "leader epoch older than the current one"
    STALE_PARTITION_EPOCH = "same leader epoch, older partition epoch"
    ALREADY_APPLIED = "same leader epoch and partition epoch"
    LEADER_CHANGED_WITHOUT_EPOCH_BUMP = "another leader in the same leader epoch"


class Ignore(msgspec.Struct, frozen=True, kw_only=True, tag="ignore"):
    reason: IgnoreReason
    error_code: ErrorCode  # per-partition answer to the controller


PartitionDecision = BecomeLeader | BecomeFollower | UpdateIsr | Ignore

_IGNORE_CODES: dict[IgnoreReason, ErrorCode] = {
    IgnoreReason.NOT_A_REPLICA: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    IgnoreReason.STALE_LEADER_EPOCH: ErrorCode.STALE_CONTROLLER_EPOCH,
    IgnoreReason.STALE_PARTITION_EPOCH: ErrorCode.STALE_CONTROLLER_EPOCH,
    # A re-delivery (the controller retries until acknowledged) is a success.
    IgnoreReason.ALREADY_APPLIED: ErrorCode.NONE,
    IgnoreReason.LEADER_CHANGED_WITHOUT_EPOCH_BUMP: ErrorCode.INVALID_REQUEST,
}


def _ignore(reason: IgnoreReason) -> Ignore:
    return Ignore(reason=reason, error_code=_IGNORE_CODES[reason])


def decide_partition_update(
    current: ReplicaState, update: LeaderAndIsrPartition, *, local_broker_id: int
) -> PartitionDecision:
    """What to do with one LeaderAndIsr partition state (see the module docstring).

    `current` is this broker's state for the partition: for one it has never seen,
    `OfflineState(topic=..., partition=...)` with unknown epochs (anything non-stale applies).
    """
    if local_broker_id not in update.replicas:
        return _ignore(IgnoreReason.NOT_A_REPLICA)
    if update.leader_epoch < current.leader_epoch:
        return _ignore(IgnoreReason.STALE_LEADER_EPOCH)
    if update.leader_epoch == current.leader_epoch:
        if update.partition_epoch < current.partition_epoch:
            return _ignore(IgnoreReason.STALE_PARTITION_EPOCH)
        if update.partition_epoch == current.partition_epoch:
            return _ignore(IgnoreReason.ALREADY_APPLIED)
        if isinstance(current, LeaderState | FollowerState):
            if update.leader != current.leader_id:
                # The controller bumps the leader epoch on every leader change; two
                # leaders in one epoch would break "one appender per (partition, epoch)".
                return _ignore(IgnoreReason.LEADER_CHANGED_WITHOUT_EPOCH_BUMP)
            return UpdateIsr(update=update)
        # Offline (stopped) in this leader epoch: nothing runs, so start afresh below.
    if update.leader == local_broker_id:
        return BecomeLeader(update=update)
    return BecomeFollower(update=update)


def new_leader_state(
    update: LeaderAndIsrPartition,
    *,
    previous: ReplicaState,
    log_end_offset: int,
    high_watermark: int,
    min_insync_replicas: int,
    now_ms: int,
) -> LeaderState:
    """The state after `BecomeLeader` (Kafka `Partition.makeLeader` with a new leader epoch).

    `log_end_offset` is the local LEO, which becomes the leader epoch start offset;
    `high_watermark` is the local HW (it never decreases from here). Follower progress is
    reset by `isr.reset_follower_progress`: a broker that was not leader forgets every
    follower LEO; a re-elected leader keeps them.
    """
    is_new_leader = not isinstance(previous, LeaderState)
    followers: list[FollowerProgress] = []
    for broker_id in update.replicas:
        if broker_id == update.leader:
            continue
        known = previous.follower(broker_id) if isinstance(previous, LeaderState) else None
        followers.append(
            reset_follower_progress(
                known if known is not None else FollowerProgress(broker_id=broker_id),
                now_ms=now_ms,
                leader_epoch_start_offset=log_end_offset,
                is_new_leader=is_new_leader or known is None,
                in_sync=broker_id in update.isr,
            )
        )
    return LeaderState(
        topic=update.topic,
        partition=update.partition,
        leader_id=update.leader,
        leader_epoch=update.leader_epoch,
        partition_epoch=update.partition_epoch,
        replicas=update.replicas,
        isr_state=CommittedIsr(isr=update.isr),
        followers=tuple(followers),
        high_watermark=high_watermark,
        min_insync_replicas=min_insync_replicas,
        leader_epoch_start_offset=log_end_offset,
    )


def apply_leader_isr_update(
    state: LeaderState, update: LeaderAndIsrPartition, *, kip903: bool = True
) -> LeaderState:
    """The leader's state after `UpdateIsr`: the controller's ISR and assignment win.

    Any change in flight is replaced by the committed state (Kafka does the same: the
    controller's word is newer than our proposal). Followers keep their progress, except
    those that left the ISR (forgotten, KIP-903); newly assigned ones start unknown,
    unassigned ones are dropped. The caller recomputes the HW. `kip903=False`
    (DELIBERATELY UNSAFE, the hole-1 canary only): those that left keep it, as before.
    Raises `ValueError` if `update` is for another leader or leader epoch.
    """
    if update.leader != state.leader_id or update.leader_epoch != state.leader_epoch:
        raise ValueError(
            f"ISR update for leader {update.leader} epoch {update.leader_epoch} applied to "
            f"leader {state.leader_id} epoch {state.leader_epoch}"
        )
    left_isr = state.isr - update.isr if kip903 else frozenset()

    def kept(broker_id: int) -> FollowerProgress:
        known = state.follower(broker_id)
        if known is None:
            return FollowerProgress(broker_id=broker_id)
        return forget_follower_progress(known) if broker_id in left_isr else known

    followers = tuple(kept(b) for b in update.replicas if b != state.leader_id)
    return msgspec.structs.replace(
        state,
        partition_epoch=update.partition_epoch,
        replicas=update.replicas,
        isr_state=CommittedIsr(isr=update.isr),
        followers=followers,
    )


def new_follower_state(update: LeaderAndIsrPartition) -> FollowerState:
    """The state after `BecomeFollower`, or after `UpdateIsr` on a follower."""
    return FollowerState(
        topic=update.topic,
        partition=update.partition,
        leader_id=update.leader,
        leader_epoch=update.leader_epoch,
        partition_epoch=update.partition_epoch,
        replicas=update.replicas,
        isr=update.isr,
    )


def check_stop_replica(current: ReplicaState, requested_leader_epoch: int) -> ErrorCode | None:
    """StopReplica fencing (Kafka, KIP-570): None to proceed, FENCED_LEADER_EPOCH if stale.

    A negative epoch (-1 "none", -2 "during delete") skips the check.
    """
    if requested_leader_epoch < 0 or requested_leader_epoch >= current.leader_epoch:
        return None
    return ErrorCode.FENCED_LEADER_EPOCH


def stopped_state(current: ReplicaState) -> OfflineState:
    """The state after StopReplica: not served, epochs kept so stale updates stay fenced."""
    return OfflineState(
        topic=current.topic,
        partition=current.partition,
        leader_epoch=current.leader_epoch,
        partition_epoch=current.partition_epoch,
    )


def check_controller_epoch(requested: int, current: int) -> ErrorCode | None:
    """Controller request fencing: older than the newest controller epoch seen is stale."""
    return ErrorCode.STALE_CONTROLLER_EPOCH if requested < current else None


def check_control_request(
    *,
    controller_epoch: int,
    broker_epoch: int,
    current_broker_epoch: int,
    seen_controller_epoch: int,
    session_controller_epoch: int,
    unsafe_before_registration: bool = False,
) -> ErrorCode | None:
    """Whether a LeaderAndIsr / StopReplica / UpdateMetadata may be applied (None) or why not.

    - Until this broker has registered (`current_broker_epoch` -1) nothing is applied:
      a request may be addressed to the previous incarnation of this broker id (a restart
      within the session timeout), whose log this process may not have (STALE_BROKER_EPOCH).
    - The request must name this incarnation exactly (never -1): STALE_BROKER_EPOCH.
    - Older than the newest controller epoch applied: STALE_CONTROLLER_EPOCH.
    - Newer than any epoch this broker's controller session has announced (register and
      heartbeat replies carry it): NOT_CONTROLLER, since no controller this broker talks
      to has that epoch; the sender retries, and the real controller's next heartbeat reply
      announces a new epoch. (A made-up high epoch would otherwise fence the real
      controller out for good.)

    `unsafe_before_registration` (test-only, the simulator's hole-2 canary) selects the
    rule before the fix: until registered, anything from a controller epoch not older
    than applied is applied (no session has announced an epoch yet); once registered, a
    request naming another incarnation is refused, one naming none (-1) applied.
    """
    if unsafe_before_registration:
        if current_broker_epoch < 0:
            return check_controller_epoch(controller_epoch, seen_controller_epoch)
        if broker_epoch >= 0 and broker_epoch != current_broker_epoch:
            return ErrorCode.STALE_BROKER_EPOCH
    elif current_broker_epoch < 0 or broker_epoch != current_broker_epoch:
        return ErrorCode.STALE_BROKER_EPOCH
    stale = check_controller_epoch(controller_epoch, seen_controller_epoch)
    if stale is not None:
        return stale
    if controller_epoch > session_controller_epoch:
        return ErrorCode.NOT_CONTROLLER
    return None


def check_leader_epoch(requested: int, current: int) -> ErrorCode | None:
    """Produce / fetch leader-epoch fencing (KIP-320, KIP-359).

    `UNKNOWN` (-1) skips the check; older -> FENCED_LEADER_EPOCH (the sender is behind);
    newer -> UNKNOWN_LEADER_EPOCH (this broker is behind; retriable).
    """
    if requested in (UNKNOWN, current):
        return None
    if requested < current:
        return ErrorCode.FENCED_LEADER_EPOCH
    return ErrorCode.UNKNOWN_LEADER_EPOCH


def check_partition_access(
    state: ReplicaState, *, requested_leader_epoch: int, require_leader: bool
) -> ErrorCode | None:
    """Kafka `Partition.getLocalLog`: the epoch check first, then the role.

    `require_leader` for produce and replica fetches; consumer fetches may read from a
    follower (KIP-392). An offline replica answers NOT_LEADER_OR_FOLLOWER.
    """
    if isinstance(state, OfflineState):
        return ErrorCode.NOT_LEADER_OR_FOLLOWER
    fenced = check_leader_epoch(requested_leader_epoch, state.leader_epoch)
    if fenced is not None:
        return fenced
    if require_leader and not isinstance(state, LeaderState):
        return ErrorCode.NOT_LEADER_OR_FOLLOWER
    return None


def check_replica_fetch_epoch(requested: int, known: int | None) -> bool:
    """Whether a replica fetch from broker epoch `requested` may be served, given the
    epoch the metadata shows for that broker (`known`, None or <= 0 when it shows none).

    A follower that has not registered (-1) never fetches; an older incarnation than
    the metadata's is a zombie (KIP-903). A newer one is served: the metadata is behind.
    """
    if requested < 0:
        return False
    return known is None or known <= 0 or requested >= known
