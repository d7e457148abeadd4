"""ISR and election faults on a single partition: R07-R09, R11, R12, and the checker's
must-fail run against the deliberately broken `--unsafe-test-hw-is-leo` broker."""

from __future__ import annotations

import time

import pytest

from tests.chaos.checker import UNCLEAN_EXPECTED
from tests.chaos.harness import Run, seeds
from tests.support.chaos_cluster import broker_name
from tests.support.cluster import wait_until

pytestmark = pytest.mark.chaos

TOPIC = "r"


def setup(run: Run, *, configs: dict[str, str] | None = None, **cluster_args: object) -> None:
    run.start_cluster(**cluster_args)  # type: ignore[arg-type]
    run.topic(TOPIC, partitions=1, configs=configs)


def roles(run: Run) -> tuple[int, list[int]]:
    assert run.cluster is not None
    leader, _, _ = run.cluster.leader_of(TOPIC, 0)
    return leader, [b for b in sorted(run.cluster.brokers) if b != leader]


def more_acks(run: Run, count: int = 20, workload: int = 0) -> None:
    w = run.workloads[workload]
    w.wait_acked(w.acked + count, timeout_s=45)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("seed", seeds())
def test_r07_isolated_follower_shrinks_and_rejoins_the_isr(run: Run, seed: int) -> None:
    setup(run)
    cluster = run.cluster
    assert cluster is not None
    run.workload(run.topic_partitions(TOPIC, 1), producers=2).start().wait_acked(20)
    leader, (follower, other) = roles(run)
    # Cut the follower from the other brokers only: it still heartbeats to the
    # controller, so the leader's lag-based shrink (AlterPartition) removes it.
    cluster.record("partition", side_a=[follower], side_b=[leader, other])
    cluster.net.partition({broker_name(follower)}, {broker_name(leader), broker_name(other)})
    cluster.wait_isr(TOPIC, 0, [leader, other], timeout_s=15)  # lag time + slack
    more_acks(run)  # writes continue: |ISR| = 2 >= min.insync.replicas
    run.heal()
    cluster.wait_isr(TOPIC, 0, [leader, follower, other], timeout_s=30)
    run.converge_and_check(TOPIC, 1)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("seed", seeds())
def test_r08_isr_below_min_isr(run: Run, seed: int) -> None:
    setup(run)
    cluster = run.cluster
    assert cluster is not None
    tps = run.topic_partitions(TOPIC, 1)
    all_acks = run.workload(tps, producers=1, consumers=1, retries=0).start()
    one_ack = run.workload(tps, producers=1, consumers=0, acks="1").start()
    all_acks.wait_acked(10)
    one_ack.wait_acked(10)
    leader, followers = roles(run)
    for follower in followers:
        cluster.kill(follower)
    cluster.wait_isr(TOPIC, 0, [leader], timeout_s=15)
    failed_before = run.count("send", "fail")
    one_ack.wait_acked(one_ack.acked + 10)  # acks=1 still succeeds
    wait_until(  # acks=all: NOT_ENOUGH_REPLICAS, a definite failure
        lambda: run.count("send", "fail") >= failed_before + 5,
        timeout_s=30,
        what="definite NOT_ENOUGH_REPLICAS failures of acks=all sends",
    )
    result = run.converge_and_check(TOPIC, 1)
    assert result.stats["sends-fail"] >= 5
    assert "G1a" not in result.error_types  # I10: definite failures never appear


@pytest.mark.timeout(240)
@pytest.mark.parametrize("seed", seeds())
def test_r09_isr_shrinks_mid_request(run: Run, seed: int) -> None:
    setup(run)
    cluster = run.cluster
    assert cluster is not None
    run.workload(run.topic_partitions(TOPIC, 1), producers=3, ops_per_s=150).start()
    run.workloads[0].wait_acked(30)
    leader, (first, last) = roles(run)
    cluster.kill(first)
    cluster.wait_isr(TOPIC, 0, [leader, last], timeout_s=15)
    more_acks(run, 10)
    cluster.kill(last)  # with acks=all requests in flight
    cluster.wait_isr(TOPIC, 0, [leader], timeout_s=15)
    result = run.converge_and_check(TOPIC, 1)
    assert "G1a" not in result.error_types


def lagging_then_isr_down(run: Run) -> tuple[int, int, int]:
    """SIGSTOP a follower until it leaves the ISR, write more, kill the leader and the
    other ISR member, resume the lagging one. Returns (leader, in-sync, lagging)."""
    cluster = run.cluster
    assert cluster is not None
    leader, (in_sync, lagging) = roles(run)
    cluster.pause(lagging)
    cluster.wait_isr(TOPIC, 0, [leader, in_sync], timeout_s=15)
    more_acks(run)  # acknowledged by the leader and `in_sync` only
    cluster.kill(leader)
    cluster.kill(in_sync)
    cluster.resume(lagging)
    cluster.wait_fenced(leader)
    cluster.wait_fenced(in_sync)
    return leader, in_sync, lagging


@pytest.mark.timeout(240)
@pytest.mark.parametrize("seed", seeds())
def test_r11_all_isr_down_unclean_off_stays_offline(run: Run, seed: int) -> None:
    setup(run)
    cluster = run.cluster
    assert cluster is not None
    run.workload(run.topic_partitions(TOPIC, 1), producers=2).start().wait_acked(20)
    _, _, lagging = lagging_then_isr_down(run)
    cluster.wait_active(1)  # the lagging replica is registered and unfenced ...
    time.sleep(2.0)  # ... and for an observation window of > one session timeout ...
    leader, _, isr = cluster.leader_of(TOPIC, 0)
    assert leader == -1, f"unclean leader {leader} elected with unclean election off"
    assert lagging not in isr  # ... it never became leader: availability lost, data kept
    run.converge_and_check(TOPIC, 1)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("seed", seeds())
def test_r12_unclean_on_loses_acknowledged_writes_and_the_checker_says_so(
    run: Run, seed: int
) -> None:
    setup(run, configs={"unclean_leader_election_enable": "true"})
    cluster = run.cluster
    assert cluster is not None
    run.workload(run.topic_partitions(TOPIC, 1), producers=2).start().wait_acked(20)
    _, _, lagging = lagging_then_isr_down(run)
    try:
        cluster.wait_leader(TOPIC, 0, timeout_s=10)
    except TimeoutError:
        cluster.elect(TOPIC, 0, "unclean")
    assert cluster.wait_leader(TOPIC, 0, timeout_s=20) == lagging  # availability restored
    run.heal()  # the old ISR returns and truncates to the unclean leader's log (I3)
    cluster.wait_isr(TOPIC, 0, sorted(cluster.brokers), timeout_s=30)
    more_acks(run, 10)
    result = run.converge_and_check(TOPIC, 1, expected=UNCLEAN_EXPECTED)
    # The loss is expected and labelled: the checker must see it.
    assert {"lost-write", "unseen"} & set(result.expected_types), result.to_text()
    print("R12 EXPECTED LOSS (unclean election):", result.counts)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("seed", seeds())
def test_checker_catches_the_unsafe_hw_broker(run: Run, seed: int) -> None:
    """Self-test: with the HW following the leader's LEO, acks=all acknowledges writes
    only the leader has; failing over loses them, and the checker must say INVALID."""
    setup(run, broker_args=["--unsafe-test-hw-is-leo", "--replica-lag-time-max-ms", "30000"])
    cluster = run.cluster
    assert cluster is not None
    run.workload(run.topic_partitions(TOPIC, 1), producers=2, consumers=0).start()
    more_acks(run, 10)
    leader, followers = roles(run)
    cluster.net.partition({broker_name(leader)}, {broker_name(f) for f in followers})
    more_acks(run, 20)  # acknowledged, but only the leader has them
    cluster.kill(leader)
    cluster.net.heal()
    cluster.wait_leader(TOPIC, 0, not_in=(leader,), timeout_s=20)
    result = run.converge_and_check(TOPIC, 1, must_be_valid=False)
    assert not result.valid, "the checker missed the loss of acknowledged writes"
    assert {"lost-write", "unseen"} & set(result.bad_error_types)
