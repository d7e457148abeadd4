"""Leader-side ISR rules: follower progress, caught-up test, shrink / expand proposals.

Pure functions over `state.LeaderState` and `state.FollowerProgress`; time is `now_ms`.
The rules are Kafka's (`Replica.scala` `ReplicaState.isCaughtUp` / `updateFetchState` /
`resetReplicaState`, `Partition.scala` `getOutOfSyncReplicas` / `needsExpandIsr` /
`handleAlterPartitionUpdate` / `handleAlterPartitionError`), with the locks left out.

Caller: the leader's `Partition` shell. On a follower fetch that carried no diverging
epoch it calls `record_follower_fetch`, then `high_watermark.advance_high_watermark`,
then `replica_to_expand`; on a periodic tick (every `replica.lag.time.max.ms / 2`, as
Kafka) `replicas_to_shrink`; a non-empty answer goes through `propose_isr_change`, whose
`AlterPartitionItem` the shell sends to the controller; the answer goes through
`apply_alter_partition_result`. At most one ISR change is in flight (KIP-497).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping

import msgspec

from broker.replica.state import (
    UNKNOWN,
    CommittedIsr,
    FollowerProgress,
    IsrState,
    LeaderState,
    PendingExpandIsr,
    PendingShrinkIsr,
)
from minikafka.errors import ErrorCode, MiniKafkaError


class IllegalIsrChange(ValueError):
    """A proposed ISR change breaks a precondition (a bug in the caller, not bad input)."""


class NotAFollowerError(MiniKafkaError):
    """A replica fetch from a broker that is not a follower replica of this partition."""

    default_code = ErrorCode.NOT_LEADER_OR_FOLLOWER


# ---- follower progress (Kafka ReplicaState) ---------------------------------------------


def is_caught_up(
    progress: FollowerProgress, *, leader_leo: int, now_ms: int, replica_lag_time_max_ms: int
) -> bool:
    """Kafka `ReplicaState.isCaughtUp`: at the leader's LEO now, or caught up within the window.

    A follower whose LEO is unknown (`UNKNOWN`) is caught up only through the time
    rule, which `reset_follower_progress` arms for ISR members of a new leader.
    """
    return (
        progress.log_end_offset >= leader_leo
        or now_ms - progress.last_caught_up_time_ms <= replica_lag_time_max_ms
    )


def update_follower_progress(
    progress: FollowerProgress,
    *,
    fetch_offset: int,
    leader_leo: int,
    now_ms: int,
    broker_epoch: int = UNKNOWN,
) -> FollowerProgress:
    """Kafka `Replica.updateFetchState` (3.x), rule for rule.

    - A fetch at offset >= the leader's LEO *now* means the follower is caught up now.
    - Else a fetch at offset >= the leader's LEO at the time of the *previous* fetch
      means the follower was caught up at that previous fetch time: it has everything
      the leader had then. Without this rule a follower could never join the ISR under
      a steady stream of small produces, since every fetch would trail the LEO a bit.
    - Else the last caught-up time stays.

    `last_caught_up_time_ms` never goes back, and `last_fetch_leader_leo` keeps the
    largest leader LEO seen (Kafka's `math.max`), so a reordered older fetch changes
    neither. `fetch_offset` becomes the follower's LEO and `broker_epoch` (the fetching
    incarnation, KIP-903) is recorded with it.
    """
    if fetch_offset >= leader_leo:
        last_caught_up_time_ms = max(progress.last_caught_up_time_ms, now_ms)
    elif fetch_offset >= progress.last_fetch_leader_leo:
        last_caught_up_time_ms = max(progress.last_caught_up_time_ms, progress.last_fetch_time_ms)
    else:
        last_caught_up_time_ms = progress.last_caught_up_time_ms
    return FollowerProgress(
        broker_id=progress.broker_id,
        log_end_offset=fetch_offset,
        last_caught_up_time_ms=last_caught_up_time_ms,
        last_fetch_time_ms=now_ms,
        last_fetch_leader_leo=max(leader_leo, progress.last_fetch_leader_leo),
        broker_epoch=broker_epoch,
    )


def forget_follower_progress(progress: FollowerProgress) -> FollowerProgress:
    """Progress as if the follower had never fetched: for a new incarnation of its broker
    and for a replica that left the ISR (KIP-903). Nothing it reported is trusted again
    until it fetches anew."""
    return FollowerProgress(broker_id=progress.broker_id)


def reset_follower_progress(
    progress: FollowerProgress,
    *,
    now_ms: int,
    leader_epoch_start_offset: int,
    is_new_leader: bool,
    in_sync: bool,
) -> FollowerProgress:
    """Kafka `Replica.resetReplicaState`, applied to every follower on a leader epoch change.

    ISR members get `last_caught_up_time_ms = now_ms`, so a new leader gives them a
    full lag window before shrinking them; others get 0, so they do not hold back the
    HW as "about to join". A broker that was not leader before (`is_new_leader`)
    forgets every follower LEO (`UNKNOWN`, which holds the HW until they fetch); a
    re-elected leader keeps the LEOs it knows.
    """
    last_caught_up_time_ms = now_ms if in_sync else 0
    if is_new_leader:
        return FollowerProgress(
            broker_id=progress.broker_id,
            log_end_offset=UNKNOWN,
            last_caught_up_time_ms=last_caught_up_time_ms,
            last_fetch_time_ms=0,
            last_fetch_leader_leo=UNKNOWN,
        )
    return FollowerProgress(
        broker_id=progress.broker_id,
        log_end_offset=progress.log_end_offset,
        last_caught_up_time_ms=last_caught_up_time_ms,
        last_fetch_time_ms=now_ms if in_sync else 0,
        last_fetch_leader_leo=leader_epoch_start_offset,
        broker_epoch=progress.broker_epoch,
    )


def record_follower_fetch(
    state: LeaderState,
    *,
    broker_id: int,
    fetch_offset: int,
    leader_leo: int,
    now_ms: int,
    broker_epoch: int = UNKNOWN,
    kip903: bool = True,
) -> LeaderState:
    """The leader's state after a replica fetch from `broker_id` (incarnation
    `broker_epoch`) at `fetch_offset`.

    Call only for fetches that were validated (current leader epoch, broker epoch) and
    carried no diverging epoch: a diverging follower has not truncated yet, so its
    offset says nothing about what it holds (Kafka skips the update the same way).
    `leader_leo` is the leader's LEO *before* the read, as in Kafka, so appends racing
    with the fetch do not keep a follower out of sync.

    KIP-903: a fetch from a newer incarnation than the progress was built from starts
    the progress afresh (the broker may have come back with a shorter log); a fetch
    from an older incarnation (a delayed request of a process that is gone) changes
    nothing. Progress without an epoch (after a leader change) adopts the fetch's.

    `kip903=False` (DELIBERATELY UNSAFE, the simulator's hole-1 canary only): the rule
    before the fix, progress without a broker epoch, whatever incarnation fetched.
    """
    progress = state.follower(broker_id)
    if progress is None:
        raise NotAFollowerError(
            f"broker {broker_id} is not a follower of {state.topic}-{state.partition} "
            f"(replicas {list(state.replicas)}, leader {state.leader_id})"
        )
    if not kip903:
        broker_epoch = UNKNOWN
    elif UNKNOWN not in (progress.broker_epoch, broker_epoch):
        if broker_epoch < progress.broker_epoch:
            return state
        if broker_epoch > progress.broker_epoch:
            progress = forget_follower_progress(progress)
    updated = update_follower_progress(
        progress,
        fetch_offset=fetch_offset,
        leader_leo=leader_leo,
        now_ms=now_ms,
        broker_epoch=broker_epoch,
    )
    return msgspec.structs.replace(state, followers=_replace_follower(state.followers, updated))


def forget_followers(state: LeaderState, broker_ids: Iterable[int]) -> LeaderState:
    """`state` with the progress of `broker_ids` forgotten (they left the ISR)."""
    gone = frozenset(broker_ids)
    if not gone:
        return state
    followers = tuple(
        forget_follower_progress(p) if p.broker_id in gone else p for p in state.followers
    )
    return msgspec.structs.replace(state, followers=followers)


def _replace_follower(
    followers: Iterable[FollowerProgress], updated: FollowerProgress
) -> tuple[FollowerProgress, ...]:
    return tuple(updated if f.broker_id == updated.broker_id else f for f in followers)


# ---- shrink and expand --------------------------------------------------------------------


def replicas_to_shrink(
    state: LeaderState, *, leader_leo: int, now_ms: int, replica_lag_time_max_ms: int
) -> frozenset[int]:
    """ISR members that have not caught up within the lag window (Kafka `getOutOfSyncReplicas`).

    Empty while a change is in flight: one AlterPartition at a time. The leader itself
    is never removed; an ISR member without progress (not a replica any more) is out.
    """
    if state.isr_state.is_inflight:
        return frozenset()
    out: set[int] = set()
    for broker_id in state.isr - {state.leader_id}:
        progress = state.follower(broker_id)
        if progress is None or not is_caught_up(
            progress,
            leader_leo=leader_leo,
            now_ms=now_ms,
            replica_lag_time_max_ms=replica_lag_time_max_ms,
        ):
            out.add(broker_id)
    return frozenset(out)


def is_follower_in_sync(state: LeaderState, progress: FollowerProgress) -> bool:
    """Kafka `isFollowerInSync`: LEO >= HW and >= the start offset of the current leader epoch.

    The second condition means the follower has replicated past the point where this
    leader's epoch began, so it truncated any diverging suffix (KIP-101/279) and
    fetched in the current epoch.
    """
    return (
        progress.log_end_offset >= state.high_watermark
        and progress.log_end_offset >= state.leader_epoch_start_offset
    )


def is_isr_eligible(
    progress: FollowerProgress, eligible_epochs: Mapping[int, int], *, kip903: bool = True
) -> bool:
    """Kafka `isReplicaIsrEligible` (KIP-841, KIP-903): the metadata shows the broker live,
    unfenced and not shutting down (`eligible_epochs` holds exactly those, with their
    current broker epochs), and the progress comes from that current incarnation.
    `kip903=False` (unsafe, the hole-1 canary only): every replica, as before the fix."""
    if not kip903:
        return True
    current = eligible_epochs.get(progress.broker_id)
    return current is not None and progress.broker_epoch == current


def replica_to_expand(
    state: LeaderState,
    *,
    broker_id: int,
    eligible_epochs: Mapping[int, int],
    kip903: bool = True,
) -> int | None:
    """`broker_id` if the fetch just recorded from it lets it join the ISR, else None.

    Kafka `needsExpandIsr(followerReplica)`: only the replica that fetched is considered
    (another follower's fetch must never re-add a broker on stale progress); nothing in
    flight, not in the committed ISR, ISR-eligible by `is_isr_eligible`, and in sync by
    `is_follower_in_sync`.

    `kip903=False` (DELIBERATELY UNSAFE, the hole-1 canary only): the rule before the
    fix, any follower's fetch proposes the first in-sync replica outside the ISR.
    """
    if not kip903:
        return _any_replica_to_expand(state)
    if state.isr_state.is_inflight or broker_id == state.leader_id or broker_id in state.isr:
        return None
    progress = state.follower(broker_id)
    if (
        progress is not None
        and is_isr_eligible(progress, eligible_epochs)
        and is_follower_in_sync(state, progress)
    ):
        return broker_id
    return None


def _any_replica_to_expand(state: LeaderState) -> int | None:
    """The expansion rule before KIP-903 (unsafe; the hole-1 canary only)."""
    if state.isr_state.is_inflight:
        return None
    for progress in state.followers:
        if progress.broker_id not in state.isr and is_follower_in_sync(state, progress):
            return progress.broker_id
    return None


def caught_up_candidates(
    state: LeaderState,
    *,
    leader_leo: int,
    now_ms: int,
    replica_lag_time_max_ms: int,
    eligible_epochs: Mapping[int, int],
    kip903: bool = True,
) -> frozenset[int]:
    """Followers outside the maximal ISR that are caught up and eligible to join.

    Kafka's `maybeIncrementLeaderHW` waits for these too ("shouldWaitForReplicaToJoinIsr"):
    otherwise, with ISR = {leader} under steady produce, the HW would run with the
    leader's LEO and such a follower would never reach the HW to be added.
    """
    return frozenset(
        p.broker_id
        for p in state.followers
        if p.broker_id not in state.maximal_isr
        and is_isr_eligible(p, eligible_epochs, kip903=kip903)
        and is_caught_up(
            p, leader_leo=leader_leo, now_ms=now_ms, replica_lag_time_max_ms=replica_lag_time_max_ms
        )
    )


# ---- AlterPartition round trip ------------------------------------------------------------


class ExpandIsr(msgspec.Struct, frozen=True, kw_only=True, tag="expand"):
    adding: int


class ShrinkIsr(msgspec.Struct, frozen=True, kw_only=True, tag="shrink"):
    removing: frozenset[int]


IsrChange = ExpandIsr | ShrinkIsr


class AlterPartitionItem(msgspec.Struct, frozen=True, kw_only=True):
    """One partition of an AlterPartition request (mirrors `AlterPartitionItem` in the proto)."""

    topic: str
    partition: int
    leader_epoch: int
    partition_epoch: int
    new_isr: tuple[int, ...]  # sorted
    #: (broker id, broker epoch) of each member of `new_isr`, in the same order: the
    #: epoch an added member fetched with (KIP-903), UNKNOWN for members kept as they are.
    new_isr_with_epochs: tuple[tuple[int, int], ...] = ()
    #: The min.insync.replicas this leader applies (its HW rule), for the controller's ELR.
    leader_min_insync_replicas: int = 0


class AlterPartitionResult(msgspec.Struct, frozen=True, kw_only=True):
    """The controller's answer for one partition (`AlterPartitionResult` in the proto).

    A request-level error (STALE_BROKER_EPOCH, NOT_CONTROLLER, a lost connection) is
    given to `apply_alter_partition_result` as that code with the other fields unset.
    """

    error_code: ErrorCode
    leader_epoch: int = UNKNOWN
    isr: frozenset[int] = frozenset()
    partition_epoch: int = UNKNOWN


class AlterPartitionOutcome(enum.Enum):
    COMMITTED = "committed"  # now CommittedIsr at the controller's partition epoch; recompute HW
    REVERTED = "reverted"  # controller refused and said so definitely; back to the committed ISR
    RETRY = "retry"  # unknown outcome; still pending: resend `pending_alter_partition` later
    AWAIT_METADATA = "await_metadata"  # still pending until a LeaderAndIsr brings the truth
    STALE_RESPONSE = "stale_response"  # answers a proposal we no longer have; ignored


def propose_isr_change(
    state: LeaderState, change: IsrChange
) -> tuple[LeaderState, AlterPartitionItem]:
    """Move the committed ISR to a pending state and build the AlterPartition item to send.

    Raises `IllegalIsrChange` if a change is in flight, an added replica is already in
    the ISR or not assigned, or a shrink is empty, removes the leader or a non-member.
    """
    current = state.isr_state
    if not isinstance(current, CommittedIsr):
        raise IllegalIsrChange(
            f"{state.topic}-{state.partition}: an ISR change is already in flight ({current})"
        )
    pending: IsrState
    if isinstance(change, ExpandIsr):
        if change.adding in current.isr or change.adding not in state.replicas:
            raise IllegalIsrChange(
                f"{state.topic}-{state.partition}: cannot add {change.adding} to ISR "
                f"{sorted(current.isr)} with replicas {list(state.replicas)}"
            )
        progress = state.follower(change.adding)
        pending = PendingExpandIsr(
            isr=current.isr,
            adding=change.adding,
            adding_broker_epoch=progress.broker_epoch if progress is not None else UNKNOWN,
            sent_partition_epoch=state.partition_epoch,
        )
    else:
        if (
            not change.removing
            or state.leader_id in change.removing
            or not change.removing <= current.isr
        ):
            raise IllegalIsrChange(
                f"{state.topic}-{state.partition}: cannot remove {sorted(change.removing)} "
                f"from ISR {sorted(current.isr)} led by {state.leader_id}"
            )
        pending = PendingShrinkIsr(
            isr=current.isr, removing=change.removing, sent_partition_epoch=state.partition_epoch
        )
    new_state = msgspec.structs.replace(state, isr_state=pending)
    return new_state, _item(new_state, pending)


def pending_alter_partition(state: LeaderState) -> AlterPartitionItem | None:
    """The AlterPartition item of the change in flight (to send or resend), None if none."""
    pending = state.isr_state
    if isinstance(pending, CommittedIsr):
        return None
    return _item(state, pending)


def _item(state: LeaderState, pending: PendingExpandIsr | PendingShrinkIsr) -> AlterPartitionItem:
    new_isr = tuple(sorted(pending.proposed_isr))
    adding = pending.adding if isinstance(pending, PendingExpandIsr) else UNKNOWN
    adding_epoch = pending.adding_broker_epoch if isinstance(pending, PendingExpandIsr) else 0
    return AlterPartitionItem(
        topic=state.topic,
        partition=state.partition,
        leader_epoch=state.leader_epoch,
        partition_epoch=pending.sent_partition_epoch,
        new_isr=new_isr,
        new_isr_with_epochs=tuple(
            (member, adding_epoch if member == adding else UNKNOWN) for member in new_isr
        ),
        leader_min_insync_replicas=state.min_insync_replicas,
    )


#: Errors where the controller definitely did not apply the change and the partition
#: epoch we sent is current (Kafka: OPERATION_NOT_ATTEMPTED, INELIGIBLE_REPLICA).
_DEFINITELY_NOT_APPLIED = frozenset({ErrorCode.INELIGIBLE_REPLICA})

#: Errors saying our view is stale; the controller's LeaderAndIsr will replace it.
_STALE_VIEW = frozenset(
    {
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.INVALID_UPDATE_VERSION,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.INVALID_REQUEST,
    }
)


def apply_alter_partition_result(
    state: LeaderState,
    sent: AlterPartitionItem,
    result: AlterPartitionResult,
    *,
    kip903: bool = True,
) -> tuple[LeaderState, AlterPartitionOutcome]:
    """Apply the controller's answer to the AlterPartition item `sent` (Kafka's rules).

    - The answer is for another proposal than the one in flight (the state changed
      meanwhile, e.g. a LeaderAndIsr already committed it): STALE_RESPONSE, unchanged.
    - Success for our leader epoch and a partition epoch not older than ours:
      `CommittedIsr(result.isr)` at `result.partition_epoch` (COMMITTED), and the progress
      of members that left is forgotten (KIP-903). The caller then recomputes the HW: a
      committed shrink may let it advance.
    - Success for another leader epoch or an older partition epoch: AWAIT_METADATA.
    - INELIGIBLE_REPLICA: the controller says it did not apply the change and our
      partition epoch is current, so going back to the committed ISR is safe (REVERTED).
    - FENCED_LEADER_EPOCH, INVALID_UPDATE_VERSION, UNKNOWN_TOPIC_OR_PARTITION,
      NOT_LEADER_OR_FOLLOWER, INVALID_REQUEST: our view is stale; stay pending (no further
      ISR change) until the controller's LeaderAndIsr replaces the state (AWAIT_METADATA).
    - Anything else (timeouts, NOT_CONTROLLER, STALE_BROKER_EPOCH, ...): the change may
      or may not have been applied, so stay pending and resend it (RETRY).

    Why never revert on an unknown outcome: if an expand was in fact committed, the
    added replica is in the true ISR and may be elected; reverting would let the HW
    pass its LEO, exposing records a future leader lacks.

    `kip903=False` (unsafe, the hole-1 canary only): members that left keep their
    progress, as before the fix.
    """
    if pending_alter_partition(state) != sent:
        return state, AlterPartitionOutcome.STALE_RESPONSE
    code = result.error_code
    if code == ErrorCode.NONE:
        if (
            result.leader_epoch != state.leader_epoch
            or result.partition_epoch < state.partition_epoch
        ):
            return state, AlterPartitionOutcome.AWAIT_METADATA
        committed = msgspec.structs.replace(
            state,
            isr_state=CommittedIsr(isr=frozenset(result.isr)),
            partition_epoch=result.partition_epoch,
        )
        left = state.isr - result.isr if kip903 else frozenset()
        return forget_followers(committed, left), AlterPartitionOutcome.COMMITTED
    if code in _DEFINITELY_NOT_APPLIED:
        reverted = msgspec.structs.replace(state, isr_state=CommittedIsr(isr=state.isr))
        return reverted, AlterPartitionOutcome.REVERTED
    if code in _STALE_VIEW:
        return state, AlterPartitionOutcome.AWAIT_METADATA
    return state, AlterPartitionOutcome.RETRY
