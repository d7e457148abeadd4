"""The broker's side of the simulator's known-bug canaries (issue 17): each test-only
`unsafe_test_...` switch must take back the WHOLE fix of its hole of the replication-safety
issue (every layer), and the default must keep the fix.

- Hole 1 (KIP-903), `BrokerConfig.unsafe_test_isr_without_broker_epoch` -> the pure ISR
  rules' `kip903=False`: progress without a broker epoch, kept across ISR changes and
  restarts, eligibility without an epoch check, expansion proposed on any follower's fetch.
- Hole 4, `BrokerConfig.unsafe_test_apply_stale_fetch_answers`: a fetch answer applies while
  the partition it was asked for is still a follower (`response_applies(same_position=False)`,
  the fetcher's lookup of the partition it asked for), and the follower log appends a batch
  of an older epoch than its epoch cache's latest (`refuse_older_epoch=False`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import msgspec
import pytest

from broker.log.errors import InconsistentEpochError
from broker.metadata_cache import BrokerInfo
from broker.replica.fetcher import FetcherSettings, ReplicaFetcher
from broker.replica.follower_fetch import FetchPosition, response_applies
from broker.replica.high_watermark import advance_high_watermark
from broker.replica.isr import (
    AlterPartitionOutcome,
    AlterPartitionResult,
    ShrinkIsr,
    apply_alter_partition_result,
    caught_up_candidates,
    is_isr_eligible,
    propose_isr_change,
    record_follower_fetch,
    replica_to_expand,
)
from broker.replica.state import UNKNOWN, CommittedIsr, LeaderState
from broker.replica.transitions import apply_leader_isr_update
from minikafka.errors import ErrorCode
from minikafka.record_batch import build_batch, stamp
from tests.support.inproc import InMemoryLeader, ManualClock, Node
from tests.unit.broker.replica.test_replica_isr import ELIGIBLE, LAG_MS, leader, progress
from tests.unit.broker.replica.test_replica_transitions import update

# ---- hole 1: the ISR rules ----------------------------------------------------------------

#: Broker 3 left the ISR; its progress is that of a previous incarnation (epoch 29, LEO 12).
STALE = leader(
    isr_state=CommittedIsr(isr=frozenset({1, 2})),
    followers=(progress(2, leo=12), progress(3, leo=12, caught_up_ms=1_000, broker_epoch=29)),
    hw=10,
)


@pytest.mark.parametrize(("kip903", "expected"), [(True, None), (False, 3)])
def test_another_followers_fetch_proposes_a_stale_replica_only_before_the_fix(
    kip903: bool, expected: int | None
) -> None:
    assert replica_to_expand(STALE, broker_id=2, eligible_epochs=ELIGIBLE, kip903=kip903) == (
        expected
    )


@pytest.mark.parametrize(("kip903", "eligible"), [(True, False), (False, True)])
def test_eligibility_ignores_the_broker_epoch_only_before_the_fix(
    kip903: bool, eligible: bool
) -> None:
    stale = STALE.follower(3)
    assert stale is not None
    assert is_isr_eligible(stale, ELIGIBLE, kip903=kip903) is eligible
    joining = caught_up_candidates(
        STALE,
        leader_leo=12,
        now_ms=1_000,
        replica_lag_time_max_ms=LAG_MS,
        eligible_epochs=ELIGIBLE,
        kip903=kip903,
    )
    assert (3 in joining) is eligible
    advanced = advance_high_watermark(
        STALE,
        leader_leo=12,
        now_ms=1_000,
        replica_lag_time_max_ms=LAG_MS,
        eligible_epochs={**ELIGIBLE, 3: 29},
        kip903=kip903,
    )
    assert advanced.high_watermark == 12  # both count the caught-up joiner the same way


@pytest.mark.parametrize(
    ("kip903", "leo", "epoch"), [(True, 4, 30), (False, 4, UNKNOWN)], ids=["fix", "pre-fix"]
)
def test_a_new_incarnations_fetch_resets_progress_only_with_the_fix(
    kip903: bool, leo: int, epoch: int
) -> None:
    after = record_follower_fetch(
        STALE,
        broker_id=3,
        fetch_offset=4,
        leader_leo=12,
        now_ms=2_000,
        broker_epoch=30,
        kip903=kip903,
    )
    fetched = after.follower(3)
    assert fetched is not None
    assert (fetched.log_end_offset, fetched.broker_epoch) == (leo, epoch)
    # Before the fix the old incarnation's caught-up time survives the restart.
    assert fetched.last_caught_up_time_ms == (0 if kip903 else 1_000)


@pytest.mark.parametrize(("kip903", "changed"), [(True, False), (False, True)])
def test_an_old_incarnations_fetch_is_ignored_only_with_the_fix(
    kip903: bool, changed: bool
) -> None:
    after = record_follower_fetch(
        STALE,
        broker_id=3,
        fetch_offset=2,
        leader_leo=12,
        now_ms=2_000,
        broker_epoch=28,
        kip903=kip903,
    )
    assert (after.follower(3) != STALE.follower(3)) is changed


def full_isr() -> LeaderState:
    return leader(followers=(progress(2, leo=12), progress(3, leo=12, caught_up_ms=900)), hw=12)


@pytest.mark.parametrize("kip903", [True, False])
def test_leaving_the_isr_forgets_progress_only_with_the_fix(kip903: bool) -> None:
    state, sent = propose_isr_change(full_isr(), ShrinkIsr(removing=frozenset({3})))
    committed, outcome = apply_alter_partition_result(
        state,
        sent,
        AlterPartitionResult(
            error_code=ErrorCode.NONE,
            leader_epoch=state.leader_epoch,
            isr=frozenset({1, 2}),
            partition_epoch=state.partition_epoch + 1,
        ),
        kip903=kip903,
    )
    assert outcome is AlterPartitionOutcome.COMMITTED
    by_controller = apply_leader_isr_update(
        msgspec.structs.replace(full_isr(), leader_id=1, leader_epoch=5),
        update(leader=1, leader_epoch=5, isr=frozenset({1, 2})),
        kip903=kip903,
    )
    for after in (committed, by_controller):
        left = after.follower(3)
        assert left is not None
        assert (left.log_end_offset == UNKNOWN) is kip903


# ---- hole 4: stale fetch answers ----------------------------------------------------------

SENT = FetchPosition(leader_id=1, leader_epoch=1, fetch_offset=10)
MOVED = FetchPosition(leader_id=2, leader_epoch=2, fetch_offset=10)


@pytest.mark.parametrize(
    ("same_position", "current", "applies"),
    [
        pytest.param(True, MOVED, False, id="fix: another leader"),
        pytest.param(False, MOVED, True, id="pre-fix: still a follower"),
        pytest.param(False, None, False, id="pre-fix: no longer a follower"),
    ],
)
def test_a_stale_answer_applies_only_before_the_fix(
    same_position: bool, current: FetchPosition | None, applies: bool
) -> None:
    assert response_applies(SENT, current, same_position=same_position) is applies


A, B, F = 1, 2, 3
REPLICAS = (A, B, F)


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[dict[int, Node]]:
    clock = ManualClock()
    made = {b: Node(b, tmp_path / f"broker-{b}", clock) for b in REPLICAS}
    yield made
    for node in made.values():
        node.close()


@pytest.fixture
async def running() -> AsyncIterator[list[asyncio.Task[None]]]:
    tasks: list[asyncio.Task[None]] = []
    yield tasks
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


@pytest.mark.parametrize(("unsafe", "appended"), [(False, 0), (True, 10)])
async def test_the_old_leaders_answer_after_a_fail_over(
    nodes: dict[int, Node], running: list[asyncio.Task[None]], unsafe: bool, appended: int
) -> None:
    """`test_replica_fetcher`'s fail-over schedule (partition 0 moves from A to B while
    F's fetch from A for both partitions is in flight): the pre-fix fetcher appends A's
    answer to partition 0, which it no longer fetches from A."""
    a, b, f = nodes[A], nodes[B], nodes[F]
    for index in (0, 1):
        for node in (a, b, f):
            node.apply(leader=A, leader_epoch=1, isr=REPLICAS, replicas=REPLICAS, index=index)
    assert (await a.produce([b"a%d" % i for i in range(10)])).error_code == 0
    old_leader = InMemoryLeader(a)
    old_leader.hold()
    settings = FetcherSettings(
        broker_id=F,
        max_wait_ms=0,
        max_bytes=1 << 20,
        partition_max_bytes=1 << 20,
        backoff_ms=10,
        broker_epoch=lambda: 1,
        now_ms=f.clock.wall_ms,
        unsafe_stale_answers=unsafe,
    )
    fetcher = ReplicaFetcher(BrokerInfo(broker_id=A, host="a", port=1), settings, old_leader)
    fetcher.set_partitions({("t", 0): f.partition(0), ("t", 1): f.partition(1)})
    running.append(asyncio.create_task(fetcher.run()))
    await asyncio.wait_for(old_leader.arrived.wait(), 5)
    for node in (a, b, f):
        node.apply(leader=B, leader_epoch=2, isr=(B, F), replicas=REPLICAS, index=0)
    fetcher.set_partitions({("t", 1): f.partition(1)})
    await old_leader.release()
    await asyncio.wait_for(old_leader.arrived.wait(), 5)
    assert f.partition(0).log.log_end_offset == appended


@pytest.mark.parametrize("refuse", [True, False])
def test_an_older_epoch_batch_rewrites_the_epoch_cache_only_before_the_fix(
    nodes: dict[int, Node], refuse: bool
) -> None:
    f = nodes[F]
    f.apply(leader=A, leader_epoch=5, isr=REPLICAS, replicas=REPLICAS)
    log = f.partition(0).log
    log.append_as_follower(
        stamp(build_batch([(1, None, b"new", None)]), base_offset=0, leader_epoch=5), now_ms=1
    )
    stale = stamp(build_batch([(1, None, b"stale", None)]), base_offset=1, leader_epoch=4)
    if refuse:
        with pytest.raises(InconsistentEpochError, match="leader epoch 4"):
            log.append_as_follower(stale, now_ms=1, refuse_older_epoch=refuse)
        assert [(e.epoch, e.start_offset) for e in log.epoch_cache.entries()] == [(5, 0)]
    else:
        log.append_as_follower(stale, now_ms=1, refuse_older_epoch=refuse)
        # The newer entry is gone: what the fix prevents.
        assert [(e.epoch, e.start_offset) for e in log.epoch_cache.entries()] == [(4, 1)]
