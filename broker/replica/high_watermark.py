"""High watermark and acks=all rules (Kafka `Partition.maybeIncrementLeaderHW`, KIP-497/966).

Pure functions; every input is an argument. Invariants the leader keeps by using them:

- HW = min LEO over the *maximal* ISR (committed ISR plus a pending expand, plus
  followers caught up and about to join), so every record below the HW is on every
  replica that is or may become an ISR member.
- The HW never decreases within a leader's tenure.
- The HW is frozen while the *committed* ISR is smaller than `min.insync.replicas`.
- acks=all is admitted only while the committed ISR is at least `min.insync.replicas`,
  and a parked acks=all produce completes only once the HW covers its batch.

An unknown follower LEO (`UNKNOWN` = -1, as after a leader change until the follower
fetches again) takes part in the minimum: it holds the HW where it is (never lowers
it, since the HW never decreases). This is Kafka's choice when it resets remote LEOs on
a leader change: a new leader cannot know what its followers hold until they fetch,
and guessing high could expose records that a later leader does not have.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

import msgspec

from broker.replica.isr import caught_up_candidates
from broker.replica.state import UNKNOWN, LeaderState


def compute_high_watermark(
    *,
    leader_id: int,
    leader_leo: int,
    follower_leo: Mapping[int, int],
    maximal_isr: frozenset[int],
    committed_isr_size: int,
    min_isr: int,
    current_hw: int,
) -> int:
    """The new HW: min LEO over `maximal_isr`; never below `current_hw`; frozen below min ISR.

    Why frozen while `committed_isr_size < min_isr`: acks=all writes are already refused
    then, but acks=0/1 writes still append. Advancing the HW would expose them to
    consumers while they sit on fewer than `min.insync.replicas` replicas, and a record
    once exposed must never disappear (KIP-966: the HW should only advance once records
    reach at least min ISR replicas). Freezing keeps them invisible until the ISR is
    large enough again; the committed size counts, because a pending expand may still be
    refused by the controller.

    `follower_leo` maps follower id to its LEO; a member of `maximal_isr` missing from
    it, or mapped to `UNKNOWN`, holds the HW (see the module docstring). `leader_id`'s
    own entry, if any, is ignored: the leader's LEO is `leader_leo`.
    """
    if committed_isr_size < min_isr:
        return current_hw
    candidate = leader_leo
    for broker_id in maximal_isr:
        if broker_id != leader_id:
            candidate = min(candidate, follower_leo.get(broker_id, UNKNOWN))
    return max(current_hw, candidate)


def advance_high_watermark(
    state: LeaderState,
    *,
    leader_leo: int,
    now_ms: int,
    replica_lag_time_max_ms: int,
    eligible_epochs: Mapping[int, int],
    kip903: bool = True,
) -> LeaderState:
    """`state` with its HW recomputed (the same object if unchanged).

    Counts the maximal ISR plus followers that are caught up and eligible to join
    (Kafka's "shouldWaitForReplicaToJoinIsr"; `eligible_epochs` as in
    `isr.is_isr_eligible`), so the HW does not run away from a follower that is about to
    be added. Call after every leader append (LEO change),
    every recorded follower fetch, and every ISR change. `kip903=False`: the unsafe
    pre-fix eligibility (the hole-1 canary only, see `isr.is_isr_eligible`).
    """
    joining = caught_up_candidates(
        state,
        leader_leo=leader_leo,
        now_ms=now_ms,
        replica_lag_time_max_ms=replica_lag_time_max_ms,
        eligible_epochs=eligible_epochs,
        kip903=kip903,
    )
    new_hw = compute_high_watermark(
        leader_id=state.leader_id,
        leader_leo=leader_leo,
        follower_leo={p.broker_id: p.log_end_offset for p in state.followers},
        maximal_isr=state.maximal_isr | joining,
        committed_isr_size=len(state.isr),
        min_isr=state.min_insync_replicas,
        current_hw=state.high_watermark,
    )
    if new_hw == state.high_watermark:
        return state
    return msgspec.structs.replace(state, high_watermark=new_hw)


def follower_high_watermark(*, leader_hw: int, log_end_offset: int, log_start_offset: int) -> int:
    """A follower's HW from a fetch response: `min(leader HW, own LEO)`, not below log start.

    Kafka's `updateHighWatermark` on followers. Not monotonic by itself: after an
    epoch truncation the local LEO, and with it the HW, may drop.
    """
    return max(log_start_offset, min(leader_hw, log_end_offset))


def can_append_with_acks_all(committed_isr_size: int, min_isr: int) -> bool:
    """Pre-append check for acks=all: False means NOT_ENOUGH_REPLICAS, nothing appended.

    Uses the committed ISR: a pending shrink has not happened yet (KIP-497) and a
    pending expand may be refused.
    """
    return committed_isr_size >= min_isr


class ProduceOutcome(enum.Enum):
    COMPLETE = "complete"  # the HW covers the batch: acknowledge success
    WAIT = "wait"  # keep the request parked
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = "not_enough_replicas_after_append"
    #: This broker no longer leads in the epoch the batch was appended in (NOT_LEADER_OR_FOLLOWER).
    LEADERSHIP_CHANGED = "leadership_changed"


def produce_outcome(
    *,
    required_offset: int,
    high_watermark: int,
    isr_size: int,
    min_isr: int,
    appended_leader_epoch: int,
    leader_epoch: int | None,
) -> ProduceOutcome:
    """What to do with a parked acks=all produce whose last offset is `required_offset - 1`,
    appended in `appended_leader_epoch`; `leader_epoch` is the epoch this broker leads in
    now (None: it does not lead).

    `isr_size` is the committed ISR size (the one the HW freeze uses).

    - Not leading in the epoch of the append any more: LEADERSHIP_CHANGED, checked first.
      Even if this broker leads again (A -> B -> A), its log may have been truncated and
      refilled in between, so the HW passing `required_offset` says nothing about this
      batch. The batch may still be committed by the new leader: the answer is indefinite.

    - HW >= `required_offset`: COMPLETE. The HW only advances while the committed ISR
      has at least `min_isr` members and is the min LEO over a superset of it, so a
      covered batch is on at least `min_isr` replicas, whatever the ISR is now. (Kafka
      answers NOT_ENOUGH_REPLICAS_AFTER_APPEND here when the ISR has shrunk meanwhile; it
      predates the HW freeze, and that answer would make the client retry a committed
      record into a duplicate.)
    - Else, committed ISR below `min_isr`: NOT_ENOUGH_REPLICAS_AFTER_APPEND, since the HW
      is frozen and the request could only time out.
    - Else WAIT (the purgatory completes it on the next HW or ISR change, or times it out
      with REQUEST_TIMED_OUT).
    """
    if leader_epoch != appended_leader_epoch:
        return ProduceOutcome.LEADERSHIP_CHANGED
    if high_watermark >= required_offset:
        return ProduceOutcome.COMPLETE
    if isr_size < min_isr:
        return ProduceOutcome.NOT_ENOUGH_REPLICAS_AFTER_APPEND
    return ProduceOutcome.WAIT


def latest_offset_available(*, high_watermark: int, leader_epoch_start_offset: int) -> bool:
    """KIP-207: may a new leader answer ListOffsets(LATEST) (or by timestamp, which the HW
    bounds too) yet?

    A new leader's HW may lag the HW its predecessor had already exposed (it learns the
    followers' progress only as they fetch). Answering it would move the latest offset
    backwards for a client that asked the old leader a moment ago. Once the HW reaches
    the start offset of the leader's epoch, every offset the old leader could have
    exposed is covered; until then the answer is OFFSET_NOT_AVAILABLE (retriable).
    """
    return high_watermark >= leader_epoch_start_offset
