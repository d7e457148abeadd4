"""Eligible leader replicas against power loss (issue 15): R22 and R46.

R22: the third replica is cut off and leaves the ISR, the leader crashes (kill -9: its
machine and page cache survive), then the last in-sync replica loses power. With ELR
(the default) the restarted replica cannot prove it kept its tail, so it leaves the ISR
and the partition stays offline until the crashed ex-leader, an eligible leader replica
holding every committed record, is back and leads: nothing is lost. With ELR off (the
negative control) the last replica standing leads with what it had flushed and the
others truncate to it: acknowledged writes are lost, labelled expected.

R46: two of three replicas lose power in sequence while the third is cut off. The
producers stop first, so the cut-off replica holds every committed record; the two
in-sync replicas then lose power (the leader, then its successor) and come back with
nothing they had not flushed. With ELR the partition stays offline (nobody eligible),
also after the cut-off replica returns: only an operator's unclean election moves it.
The longest-log recovery strategy picks the cut-off replica and loses nothing; the
first-alive strategy picks the first replica in assignment order that is alive (never
the cut-off one here: the scenario is built so the two differ) and loses the
acknowledged records, which the loss receipts of the truncating replica list exactly
(cross-checked against the history checker). With ELR off the last replica standing
leads again and the loss shows.
"""

from __future__ import annotations

import time

import pytest

from minikafka.errors import ErrorCode
from tests.chaos.checker import UNCLEAN_EXPECTED
from tests.chaos.harness import Run, seeds
from tests.chaos.receipts import verify_receipts
from tests.support.chaos_cluster import ChaosCluster, broker_name
from tests.support.cluster import wait_until

pytestmark = pytest.mark.chaos

TOPIC = "e"

# Longer than a session timeout (FAST_CONTROLLER_ARGS: 1.5 s) and several heartbeats: a
# window in which a wrong election would have happened. An observation, not a wait.
OFFLINE_OBSERVATION_S = 2.5


def start(run: Run, *, flush_policy: str, controller_args: list[str]) -> ChaosCluster:
    cluster = run.start_cluster(lazy_fs=True, controller_args=controller_args)
    run.topic(TOPIC, partitions=1, configs={"flush.policy": flush_policy})
    cluster.wait_full_isr(TOPIC, 1)
    return cluster


def more_acks(run: Run, count: int) -> None:
    workload = run.workloads[-1]
    workload.wait_acked(workload.acked + count, timeout_s=45)


def wait_registered(cluster: ChaosCluster, broker_ids: list[int], timeout_s: float = 30) -> None:
    """Until every broker in `broker_ids` is registered and unfenced."""

    def registered() -> bool:
        brokers = {b.endpoint.broker_id: b for b in cluster.describe().brokers}
        return all(b in brokers and not brokers[b].fenced for b in broker_ids)

    wait_until(registered, timeout_s=timeout_s, what=f"brokers {broker_ids} registered")


def assert_stays_offline(cluster: ChaosCluster, why: str) -> None:
    """The partition has no leader now and after an observation window."""
    for _ in range(2):
        leader, epoch, isr = cluster.leader_of(TOPIC, 0)
        assert leader == -1, f"{why}: broker {leader} leads (epoch {epoch}, ISR {isr})"
        time.sleep(OFFLINE_OBSERVATION_S)


def elr_args(elr: bool, strategy: str = "longest-log") -> list[str]:
    if not elr:
        return ["--no-eligible-leader-replicas"]
    return ["--eligible-leader-replicas", "--unclean-recovery-strategy", strategy]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("seed", seeds())
@pytest.mark.parametrize(
    ("flush_policy", "elr"),
    [("fsync", True), ("none", True), ("none", False)],
    ids=["fsync-elr", "no-fsync-elr", "no-fsync-no-elr-negative-control"],
)
def test_r22_leader_crash_then_the_last_isr_member_loses_power(
    run: Run, seed: int, flush_policy: str, elr: bool
) -> None:
    cluster = start(run, flush_policy=flush_policy, controller_args=elr_args(elr))
    run.workload(run.topic_partitions(TOPIC, 1), producers=2, consumers=1).start()
    more_acks(run, 20)
    leader, _, _ = cluster.leader_of(TOPIC, 0)
    f1, f2 = (b for b in sorted(cluster.brokers) if b != leader)
    cluster.net.isolate(broker_name(f2))
    cluster.wait_isr(TOPIC, 0, sorted([leader, f1]), timeout_s=30)
    more_acks(run, 20)  # acknowledged by the leader and f1 only
    cluster.kill(leader)
    assert cluster.wait_leader(TOPIC, 0, not_in=(leader,), timeout_s=20) == f1
    cluster.power_loss(f1)
    cluster.start_broker(f1)
    if flush_policy == "fsync":
        # f1 fsynced every record before it counted: its restart loses nothing and it
        # may stay in the ISR and lead.
        run.converge_and_check(TOPIC, 1)
        return
    if not elr:
        result = run.converge_and_check(TOPIC, 1, expected=UNCLEAN_EXPECTED)
        assert {"lost-write", "unseen"} & set(result.expected_types), result.to_text()
        print("R22 EXPECTED LOSS (ELR off, last ISR member lost power):", result.counts)
        return
    wait_registered(cluster, [f1])
    assert_stays_offline(cluster, "f1 lost power and cannot prove its tail")
    # heal: f2 returns and the crashed ex-leader restarts (same machine, page cache kept:
    # it proves its log intact) and leads as an eligible leader replica.
    run.heal()
    assert cluster.wait_leader(TOPIC, 0, timeout_s=30) == leader
    more_acks(run, 10)
    run.converge_and_check(TOPIC, 1)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("seed", seeds())
@pytest.mark.parametrize(
    ("elr", "strategy"),
    [(True, "longest-log"), (True, "first-alive"), (False, "longest-log")],
    ids=["elr-longest-log", "elr-first-alive", "no-elr-negative-control"],
)
def test_r46_two_replicas_lose_power_in_sequence_while_the_third_is_cut_off(
    run: Run, seed: int, elr: bool, strategy: str
) -> None:
    cluster = start(run, flush_policy="none", controller_args=elr_args(elr, strategy))
    writers = run.workload(run.topic_partitions(TOPIC, 1), producers=2, consumers=1).start()
    more_acks(run, 30)
    writers.stop()  # from here on every committed record is on all three replicas
    cluster.wait_full_isr(TOPIC, 1)
    cluster.wait_identical_replicas(TOPIC, 1)
    leader, _, _ = cluster.leader_of(TOPIC, 0)
    # Cut off a replica that is not first in assignment order, so that first-alive
    # (which takes the first alive replica in that order) never picks it.
    assignment = cluster.assignment_of(TOPIC, 0)
    cut_off = next(b for b in reversed(assignment) if b != leader and b != assignment[0])
    (successor,) = (b for b in assignment if b not in (leader, cut_off))
    cluster.net.isolate(broker_name(cut_off))
    cluster.wait_isr(TOPIC, 0, sorted([leader, successor]), timeout_s=30)
    cluster.power_loss(leader)
    assert cluster.wait_leader(TOPIC, 0, not_in=(leader,), timeout_s=20) == successor
    cluster.power_loss(successor)
    cluster.start_broker(leader)
    cluster.start_broker(successor)
    if not elr:
        # The last replica standing leads with what it had flushed; the cut-off replica
        # truncates to it when it returns.
        result = run.converge_and_check(TOPIC, 1, expected=UNCLEAN_EXPECTED)
        assert {"lost-write", "unseen"} & set(result.expected_types), result.to_text()
        print("R46 EXPECTED LOSS (ELR off, two replicas lost power):", result.counts)
        return
    wait_registered(cluster, [leader, successor])
    assert_stays_offline(cluster, "both in-sync replicas lost power")
    cluster.heal_network()
    wait_registered(cluster, sorted(cluster.brokers))
    assert_stays_offline(cluster, "the returned replica had left the ISR at min ISR")
    assert cluster.elect(TOPIC, 0, "unclean") == ErrorCode.NONE
    elected = cluster.wait_leader(TOPIC, 0, timeout_s=20)
    run.workload(run.topic_partitions(TOPIC, 1), producers=2, consumers=0).start()
    more_acks(run, 10)
    if strategy == "longest-log":
        assert elected == cut_off, f"longest-log elected {elected}, not {cut_off}"
        result = run.converge_and_check(TOPIC, 1)
        assert not result.expected_types, result.to_text()
        return
    assert elected != cut_off, f"first-alive elected the cut-off replica {cut_off}"
    result = run.converge_and_check(TOPIC, 1, expected=UNCLEAN_EXPECTED)
    assert {"lost-write", "unseen"} & set(result.expected_types), result.to_text()
    receipts = verify_receipts(run)
    assert receipts.lost, "first-alive lost no acknowledged write: nothing was compared"
    print(
        f"R46 first-alive: {len(receipts.lost)} acknowledged writes lost, every one in the "
        f"loss receipts of broker {cut_off}; longest-log loses none"
    )
