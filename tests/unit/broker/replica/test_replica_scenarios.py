"""KIP-101 scenarios 1 and 2, KIP-279 (A -> B -> A) and KAFKA-7164, played on in-memory logs.

Each replica is a list of (epoch, value) records plus an epoch cache; only the pure
functions of `broker.replica` decide anything: the leader's HW and acks=all
completion, the divergence check, the follower's truncation point, and the
LeaderAndIsr decision. Every scenario ends with identical logs and no acknowledged
record lost. A Hypothesis property drives random leader changes, appends and partial
replication and checks the same, plus "truncation never goes below the point where the
follower's and leader's logs diverge".
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.replica.high_watermark import (
    ProduceOutcome,
    advance_high_watermark,
    can_append_with_acks_all,
    follower_high_watermark,
    produce_outcome,
)
from broker.replica.isr import record_follower_fetch
from broker.replica.state import UNKNOWN, LeaderState, OfflineState, ReplicaState
from broker.replica.transitions import (
    BecomeFollower,
    BecomeLeader,
    LeaderAndIsrPartition,
    decide_partition_update,
    new_follower_state,
    new_leader_state,
)
from broker.replica.truncation import EpochStart, diverging_epoch_for_fetch, truncation_point

Record = tuple[int, str]  # (leader epoch, value)
LAG_MS = 10_000
FETCH_ROUNDS_MAX = 20


@dataclasses.dataclass
class SimReplica:
    """An in-memory log with Kafka's epoch-cache bookkeeping."""

    broker_id: int
    records: list[Record] = dataclasses.field(default_factory=list)
    cache: list[EpochStart] = dataclasses.field(default_factory=list)
    hw: int = 0

    @property
    def leo(self) -> int:
        return len(self.records)

    @property
    def latest_epoch(self) -> int:
        return self.cache[-1][0] if self.cache else UNKNOWN

    def assign(self, epoch: int, start_offset: int) -> None:
        # Kafka LeaderEpochFileCache.assign: a newer epoch replaces any entry that would
        # break monotonic start offsets (a short-lived leader's empty epoch).
        if epoch > self.latest_epoch:
            self.cache = [(e, s) for e, s in self.cache if s < start_offset]
            self.cache.append((epoch, start_offset))

    def append(self, records: list[Record]) -> None:
        for epoch, value in records:
            self.assign(epoch, self.leo)
            self.records.append((epoch, value))

    def truncate_to(self, offset: int) -> None:
        # Kafka UnifiedLog.truncateTo: the epoch cache is truncated from the end even
        # when the log itself is not (an entry a short-lived leader assigned at its LEO).
        end = min(offset, self.leo)
        del self.records[end:]
        self.cache = [(e, s) for e, s in self.cache if s < end]
        self.hw = min(self.hw, end)


def common_prefix(a: list[Record], b: list[Record]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def fetch(follower: SimReplica, leader: SimReplica, max_records: int = 1_000) -> int:
    """One follower fetch cycle: truncate while the leader reports divergence, then copy.

    Returns the fetch offset the leader finally accepted. Checks on every truncation
    that it never cuts into the prefix both logs share.
    """
    for _ in range(FETCH_ROUNDS_MAX):
        diverging = diverging_epoch_for_fetch(
            local_entries=leader.cache,
            log_end_offset=leader.leo,
            log_start_offset=0,
            fetch_offset=follower.leo,
            last_fetched_epoch=follower.latest_epoch,
        )
        if diverging is None:
            break
        point = truncation_point(
            local_entries=follower.cache, log_end_offset=follower.leo, diverging=diverging
        )
        assert point.offset >= common_prefix(follower.records, leader.records)
        follower.truncate_to(point.offset)
    else:
        pytest.fail(f"no agreement after {FETCH_ROUNDS_MAX} rounds")
    fetch_offset = follower.leo
    assert follower.records == leader.records[:fetch_offset]  # a prefix before appending
    follower.append(leader.records[fetch_offset : fetch_offset + max_records])
    return fetch_offset


def partition(
    leader: int, epoch: int, isr: set[int], replicas: tuple[int, ...]
) -> LeaderAndIsrPartition:
    return LeaderAndIsrPartition(
        topic="t",
        partition=0,
        leader=leader,
        leader_epoch=epoch,
        partition_epoch=epoch,
        isr=frozenset(isr),
        replicas=replicas,
    )


def become_leader(
    replica: SimReplica, update: LeaderAndIsrPartition, previous: ReplicaState
) -> LeaderState:
    assert isinstance(
        decide_partition_update(previous, update, local_broker_id=replica.broker_id), BecomeLeader
    )
    replica.assign(update.leader_epoch, replica.leo)  # before serving anything (KIP-279)
    return new_leader_state(
        update,
        previous=previous,
        log_end_offset=replica.leo,
        high_watermark=replica.hw,
        min_insync_replicas=1,
        now_ms=0,
    )


class SimLeader:
    """A leader replica with its pure `LeaderState`, serving fetches and acks=all produces."""

    def __init__(self, replica: SimReplica, state: LeaderState) -> None:
        self.replica = replica
        self.state = state

    def produce(self, value: str) -> int:
        assert can_append_with_acks_all(len(self.state.isr), self.state.min_insync_replicas)
        self.replica.append([(self.state.leader_epoch, value)])
        return self.replica.leo  # required offset: the HW must reach it

    def serve(self, follower: SimReplica, now_ms: int) -> None:
        fetch_offset = fetch(follower, self.replica)
        self.state = record_follower_fetch(
            self.state,
            broker_id=follower.broker_id,
            fetch_offset=fetch_offset,
            leader_leo=self.replica.leo,
            now_ms=now_ms,
        )
        self.state = advance_high_watermark(
            self.state,
            leader_leo=self.replica.leo,
            now_ms=now_ms,
            replica_lag_time_max_ms=LAG_MS,
            eligible_epochs={},
        )
        self.replica.hw = self.state.high_watermark
        follower.hw = follower_high_watermark(
            leader_hw=self.state.high_watermark, log_end_offset=follower.leo, log_start_offset=0
        )

    def acked(self, required_offset: int) -> bool:
        outcome = produce_outcome(
            required_offset=required_offset,
            high_watermark=self.state.high_watermark,
            isr_size=len(self.state.isr),
            min_isr=self.state.min_insync_replicas,
            appended_leader_epoch=self.state.leader_epoch,
            leader_epoch=self.state.leader_epoch,
        )
        return outcome is ProduceOutcome.COMPLETE


def test_kip101_scenario1_follower_restart_then_leader_failure_keeps_acked_m2() -> None:
    a, b = SimReplica(0), SimReplica(1)
    leader_b = SimLeader(
        b, become_leader(b, partition(1, 1, {0, 1}, (0, 1)), OfflineState(topic="t", partition=0))
    )
    m1 = leader_b.produce("m1")
    leader_b.serve(a, now_ms=1)  # A fetches m1
    leader_b.serve(a, now_ms=2)  # A at offset 1: HW covers m1
    assert leader_b.acked(m1)
    assert a.hw == 1
    m2 = leader_b.produce("m2")
    leader_b.serve(a, now_ms=3)  # A fetches m2; the HW needs A's next fetch
    assert not leader_b.acked(m2)
    fetch_offset = fetch(a, b)  # A's next fetch reaches B ...
    leader_b.state = advance_high_watermark(
        record_follower_fetch(
            leader_b.state, broker_id=0, fetch_offset=fetch_offset, leader_leo=b.leo, now_ms=4
        ),
        leader_leo=b.leo,
        now_ms=4,
        replica_lag_time_max_ms=LAG_MS,
        eligible_epochs={},
    )
    assert leader_b.acked(m2)  # ... m2 is acknowledged, but the response to A is lost
    assert a.hw == 1  # A's HW lags: truncating to it (pre-KIP-101) would drop m2
    assert "m2" not in [value for _, value in a.records[: a.hw]]

    # A restarts: no truncation to the HW. B fails; A (in the ISR) is elected in epoch 2.
    leader_a = SimLeader(
        a, become_leader(a, partition(0, 2, {0}, (0, 1)), OfflineState(topic="t", partition=0))
    )
    assert a.records == [(1, "m1"), (1, "m2")]
    # B returns as a follower of epoch 2 and converges.
    decision = decide_partition_update(
        OfflineState(topic="t", partition=0), partition(0, 2, {0}, (0, 1)), local_broker_id=1
    )
    assert isinstance(decision, BecomeFollower)
    leader_a.serve(b, now_ms=5)
    assert a.records == b.records == [(1, "m1"), (1, "m2")]


def test_kip101_scenario2_divergence_after_double_crash_converges() -> None:
    a, b = SimReplica(0), SimReplica(1)
    b.append([(1, "m1")])
    a.append([(1, "m1")])
    b.append([(1, "m2")])  # unreplicated; power fails on both
    leader_a = SimLeader(
        a, become_leader(a, partition(0, 2, {0}, (0, 1)), OfflineState(topic="t", partition=0))
    )
    leader_a.produce("m3")  # offset 1 in epoch 2
    assert a.cache == [(1, 0), (2, 1)]
    leader_a.serve(b, now_ms=1)  # B: diverging (1, 1) -> truncate m2, then fetch m3
    assert a.records == b.records == [(1, "m1"), (2, "m3")]
    assert a.cache == b.cache


@pytest.mark.parametrize(
    "b_epoch2_records", [pytest.param(4, id="ends-below-21"), pytest.param(15, id="ends-past-21")]
)
def test_kip279_fast_failover_a_b_a_converges(b_epoch2_records: int) -> None:
    a, b = SimReplica(0), SimReplica(1)
    a.append([(1, f"a{i}") for i in range(21)])  # epoch 1: A leads, offsets 0..20
    b.append(a.records[:11])  # B replicated 0..10
    # Epoch 2: B leads before catching up and appends; A never becomes its follower.
    leader_b = SimLeader(
        b,
        become_leader(
            b, partition(1, 2, {1}, (0, 1)), new_follower_state(partition(0, 1, {0, 1}, (0, 1)))
        ),
    )
    for i in range(b_epoch2_records):
        leader_b.produce(f"b{i}")
    # Epoch 3: back to A, which never saw epoch 2.
    leader_a = SimLeader(
        a, become_leader(a, partition(0, 3, {0}, (0, 1)), OfflineState(topic="t", partition=0))
    )
    leader_a.produce("a21")
    assert a.cache == [(1, 0), (3, 21)]
    leader_a.serve(b, now_ms=1)
    assert b.records == a.records
    assert b.cache == a.cache
    assert b.records[:11] == [(1, f"a{i}") for i in range(11)]  # the committed prefix survives


def test_kafka7164_same_leader_new_epoch_still_truncates() -> None:
    r1, r2, r3 = SimReplica(1), SimReplica(2), SimReplica(3)
    replicas = (1, 2, 3)
    leader_r1 = SimLeader(
        r1,
        become_leader(
            r1, partition(1, 0, {1, 2, 3}, replicas), OfflineState(topic="t", partition=0)
        ),
    )
    leader_r1.produce("id0")
    leader_r1.serve(r3, now_ms=1)
    r3_state: ReplicaState = new_follower_state(partition(1, 0, {1, 2, 3}, replicas))
    # Epoch 1: r2 leads with an empty log; r1 follows and truncates; r3 misses the change.
    leader_r2 = SimLeader(
        r2,
        become_leader(r2, partition(2, 1, {1, 2}, replicas), OfflineState(topic="t", partition=0)),
    )
    leader_r2.serve(r1, now_ms=2)
    assert r1.records == []
    # Epoch 2: r1 leads again and writes another record at offset 0.
    leader_r1 = SimLeader(
        r1,
        become_leader(
            r1,
            partition(1, 2, {1}, replicas),
            new_follower_state(partition(2, 1, {1, 2}, replicas)),
        ),
    )
    leader_r1.produce("id1")
    # r3 gets epoch 2 with the same leader r1: the epoch changed, so it must re-truncate.
    decision = decide_partition_update(r3_state, partition(1, 2, {1}, replicas), local_broker_id=3)
    assert isinstance(decision, BecomeFollower)
    leader_r1.serve(r3, now_ms=3)
    assert r3.records == r1.records == [(2, "id1")]


# ---- random histories ----------------------------------------------------------------------

action_st = st.one_of(
    st.tuples(st.just("append"), st.integers(1, 4), st.just(0)),  # (kind, how many, -)
    st.tuples(st.just("fetch"), st.integers(0, 2), st.integers(1, 5)),  # (kind, who, max)
    st.tuples(st.just("elect"), st.integers(0, 2), st.just(0)),  # (kind, who, -)
)


@settings(max_examples=300, deadline=None)
@given(actions=st.lists(action_st, max_size=30))
def test_random_leader_changes_converge_and_keep_data_held_by_all(
    actions: list[tuple[str, int, int]],
) -> None:
    """Any sequence of appends, partial fetches and (even unclean) elections: truncation never
    cuts the follower/leader common prefix, whatever all replicas held is never lost, and
    after a final catch-up all logs are identical."""
    replicas = [SimReplica(i) for i in range(3)]
    leader, epoch, serial = replicas[0], 0, 0
    leader.assign(0, 0)
    held_by_all: list[Record] = []
    for kind, arg, max_records in actions:
        if kind == "append":
            for _ in range(arg):
                leader.append([(epoch, f"v{serial}")])
                serial += 1
        elif kind == "fetch":
            if replicas[arg] is not leader:
                fetch(replicas[arg], leader, max_records=max_records)
        else:
            leader, epoch = replicas[arg], epoch + 1
            leader.assign(epoch, leader.leo)
        shared = min(common_prefix(leader.records, r.records) for r in replicas)
        held_by_all = max(held_by_all, leader.records[:shared], key=len)
        for r in replicas:
            assert r.records[: len(held_by_all)] == held_by_all
    for r in replicas:
        if r is not leader:
            fetch(r, leader)
    assert all(r.records == leader.records for r in replicas)
