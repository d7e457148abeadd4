"""Consumer groups under faults (issue 20): G01 members, G02 and G03 the coordinator.

Three consumers of one group (each its own process, `tests/support/group_worker.py`) read
a topic of 6 partitions while two producers write to it (acks=all, recorded in the
history). Every scenario ends the same way: the faults are healed, the producers stop,
the group reads everything (bounded), the members leave, the group's committed offsets are
read, and `group_checker` judges the workers' logs against the history: no partition owned
by two live members at once, every acknowledged record processed, no successful commit
lost or overtaken by a lower one, no commit of a fenced member accepted, and every member
given a partition starts at its committed offset. The producers' history also goes
through the queue checker.

G01: members join, leave (SIGTERM), are kill -9'd, paused past their session timeout
(fenced while stopped: after SIGCONT they learn they lost their partitions) and paused
briefly (not fenced), with a stable assignment awaited after each step.
G02: the coordinator's broker (leader of the group's `__consumer_offsets` partition) is
kill -9'd while every member commits after each poll, twice; commits go to the new
coordinator once it has replayed the partition, and the killed broker comes back.
G03: the coordinator's broker is cut off from the other brokers and the controller (not
from the members, which the proxies do not stand between) for two session timeouts: its
commits cannot be replicated, so the members' commits fail (outcome unknown), they find
the new coordinator and go on there; healed, the old one follows. The cut-off broker
still believes it leads: without its lease (`offsets.coordinator_lease_holds`) it kept
answering the members' heartbeats from memory while the new coordinator fenced them for
silence and gave their partitions to another member (two owners at once, every seed).
In all three the offsets partition is compacted every few dozen commits (`BROKER_ARGS`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from minikafka.v1 import broker_pb2
from tests.chaos.group_checker import GroupCheckResult, check_group, commits
from tests.chaos.group_workers import SESSION_TIMEOUT_MS, GroupWorkers
from tests.chaos.harness import Run, seeds
from tests.chaos.workload import Workload
from tests.support.chaos_cluster import ChaosCluster, broker_name
from tests.support.cluster import wait_until

pytestmark = pytest.mark.chaos

TOPIC = "g"
GROUP = "chaos-group"
PARTITIONS = 6
#: A low compaction threshold: the group's `__consumer_offsets` partition is compacted
#: every few dozen commits, so the faults also hit snapshots and moved log starts.
BROKER_ARGS = [
    "--group-consumer-heartbeat-interval-ms",
    "250",
    "--offsets-topic-num-partitions",
    "3",
    "--offsets-compaction-min-records",
    "50",
]
#: A pause well within the session timeout (the fault's length): it keeps its partitions.
SHORT_PAUSE_S = SESSION_TIMEOUT_MS / 1000 / 3
DRAIN_TIMEOUT_S = 60.0
#: How long G03 keeps the coordinator cut off: two session timeouts.
CUT_OFF_S = SESSION_TIMEOUT_MS / 1000 * 2


@pytest.fixture
def members(run: Run, tmp_path: Path) -> Iterator[GroupWorkers]:
    cluster = run.start_cluster(broker_args=BROKER_ARGS)
    run.topic(TOPIC, partitions=PARTITIONS)
    workers = GroupWorkers(
        run.history,
        cluster,
        run.artifacts / "group",
        group=GROUP,
        topic=TOPIC,
        partitions=PARTITIONS,
    )
    try:
        yield workers
    finally:
        workers.close()


def producers(run: Run) -> Workload:
    return run.workload(run.topic_partitions(TOPIC, PARTITIONS), producers=2, consumers=0).start()


def more_acks(workload: Workload, count: int) -> None:
    workload.wait_acked(workload.acked + count, timeout_s=45)


def finish(run: Run, workers: GroupWorkers) -> GroupCheckResult:
    """Heal, stop the producers, let the group read everything, stop the members, read
    the committed offsets and check the group history (then the producers' history)."""
    for workload in run.workloads:
        workload.stop()
    run.heal()
    acked = {
        (op["value"][0][1], op["value"][0][2][0])
        for op in run.history.ops
        if op.get("f") == "send" and op["type"] == "ok"
    }
    wait_until(
        lambda: acked <= workers.processed(),
        timeout_s=DRAIN_TIMEOUT_S,
        interval_s=0.5,
        what=f"the group to process all {len(acked)} acknowledged records",
    )
    for name in sorted(workers.live):
        workers.stop(name)
    committed = workers.committed()
    events = workers.events()
    run.history.dump(run.artifacts / "history.jsonl")
    result = check_group(events, run.history.ops, committed)
    result.write(run.artifacts)
    print(result.to_text())
    if not result.valid:
        pytest.fail(run.failure_text(result.to_text()), pytrace=False)
    run.converge_and_check(TOPIC, PARTITIONS)
    return result


def coordinator_of(cluster: ChaosCluster, group: str) -> int:
    """The broker id of the group's coordinator, asked of a live broker (bounded)."""

    def ask() -> int | None:
        for broker_id, process in cluster.brokers.items():
            if not process.alive():
                continue
            try:
                reply = cluster.stub(broker_id).FindCoordinator(
                    broker_pb2.FindCoordinatorRequest(group_ids=[group]), timeout=2
                )
            except Exception:
                continue
            [found] = reply.coordinators
            if found.error_code == 0 and cluster.brokers[found.node_id].alive():
                return int(found.node_id)
        return None

    return wait_until(ask, timeout_s=30, interval_s=0.2, what=f"a coordinator for {group}")


@pytest.mark.timeout(240)
@pytest.mark.parametrize("seed", seeds())
def test_g01_members_join_leave_crash_and_pause(run: Run, seed: int, members: GroupWorkers) -> None:
    writers = producers(run)
    members.start("w1")
    members.wait_stable(["w1"])
    more_acks(writers, 20)
    members.start("w2")
    members.start("w3")
    members.wait_stable(["w1", "w2", "w3"])
    more_acks(writers, 20)
    order = ["w1", "w2", "w3"]
    run.rng.shuffle(order)
    crashed, frozen, leaving = order

    members.kill(crashed)  # kill -9: fenced after its session timeout
    members.wait_stable([frozen, leaving])
    members.start(crashed)  # a new process: resumes at the committed offsets
    members.wait_stable(order)
    more_acks(writers, 20)

    members.pause(frozen)
    # Stopped until the coordinator fenced it (its session timed out) and the others own
    # everything: then it learns after SIGCONT that it lost its partitions.
    members.wait_stable([crashed, leaving])
    members.resume(frozen)
    members.wait_stable(order)
    more_acks(writers, 20)

    members.pause(frozen)  # briefly: keeps its partitions
    time.sleep(SHORT_PAUSE_S)
    members.resume(frozen)
    more_acks(writers, 10)

    members.stop(leaving)  # leaves the group
    members.wait_stable([crashed, frozen])
    members.start("w4")
    members.wait_stable([crashed, frozen, "w4"])
    more_acks(writers, 20)
    result = finish(run, members)
    assert result.stats["commits_ok"] > 0, result.stats
    assert result.stats["members"] >= 5, result.stats
    # The scenario did what it says: partitions changed hands at committed offsets, and
    # the member paused past its session timeout learnt it had lost its partitions.
    assert result.stats["resumes_from_commits"] > 0, result.stats
    lost = [e for e in members.events() if e["event"] == "lost" and e["name"] == frozen]
    assert lost, f"{frozen} was never told it lost its partitions"


@pytest.mark.timeout(240)
@pytest.mark.parametrize("seed", seeds())
def test_g02_coordinator_killed_during_commits(run: Run, seed: int, members: GroupWorkers) -> None:
    cluster = run.cluster
    assert cluster is not None
    writers = producers(run)
    for name in ("w1", "w2", "w3"):
        members.start(name)
    members.wait_stable(["w1", "w2", "w3"])
    more_acks(writers, 30)
    for _ in range(2):
        coordinator = coordinator_of(cluster, GROUP)
        ok_before = count_commits(members, "ok")
        # Kill it the moment a member's log shows a commit on its way.
        wait_until(members.commit_in_flight, timeout_s=30, interval_s=0.002, what="a commit")
        cluster.kill(coordinator)
        moved = coordinator_of(cluster, GROUP)
        assert moved != coordinator

        # Commits succeed again, through the new coordinator.
        def committing(n: int = ok_before) -> bool:
            return count_commits(members, "ok") > n + 6

        wait_until(
            committing,
            timeout_s=45,
            interval_s=0.2,
            what="commits after the coordinator moved",
        )
        cluster.start_broker(coordinator)
        cluster.wait_full_isr(TOPIC, PARTITIONS, timeout_s=60)
        more_acks(writers, 20)
    members.wait_stable(["w1", "w2", "w3"])
    result = finish(run, members)
    assert result.stats["commits_ok"] > 0, result.stats
    print(f"G02: commits in flight at the coordinator's kills: {in_flight_at_kills(run, members)}")


def in_flight_at_kills(run: Run, members: GroupWorkers) -> list[int]:
    """For each broker kill, how many commits were sent before it and answered after."""
    every = commits(members.events(), run.history.ops)
    kills = [
        op["time"] for op in run.history.ops if op.get("f") == "nemesis" and op["value"] == "kill"
    ]
    return [sum(1 for c in every if c.invoke_ns < t <= c.done_ns) for t in kills]


def count_commits(members: GroupWorkers, outcome: str) -> int:
    return sum(1 for e in members.events() if e["event"] == "commit" and e.get("type") == outcome)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("seed", seeds())
def test_g03_coordinator_cut_off_from_the_cluster_but_not_from_members(
    run: Run, seed: int, members: GroupWorkers
) -> None:
    cluster = run.cluster
    assert cluster is not None
    writers = producers(run)
    for name in ("w1", "w2", "w3"):
        members.start(name)
    members.wait_stable(["w1", "w2", "w3"])
    more_acks(writers, 30)
    coordinator = coordinator_of(cluster, GROUP)
    others = {broker_name(b) for b in cluster.brokers if b != coordinator} | {"controller"}
    # The members (processes the proxies do not know) still reach the cut-off broker.
    cluster.record("partition", side_a=[broker_name(coordinator)], side_b=sorted(others))
    cluster.net.partition({broker_name(coordinator)}, others)
    moved = coordinator_of_excluding(cluster, GROUP, coordinator)
    assert moved != coordinator
    ok_before = count_commits(members, "ok")
    time.sleep(CUT_OFF_S)  # the fault's length
    wait_until(
        lambda: count_commits(members, "ok") > ok_before + 6,
        timeout_s=45,
        interval_s=0.2,
        what="commits through the new coordinator",
    )
    more_acks(writers, 20)
    result = finish(run, members)
    assert result.stats["commits_ok"] > 0, result.stats


def coordinator_of_excluding(cluster: ChaosCluster, group: str, old: int) -> int:
    """The coordinator another broker than `old` names (bounded)."""

    def ask() -> int | None:
        for broker_id in cluster.brokers:
            if broker_id == old:
                continue
            try:
                reply = cluster.stub(broker_id).FindCoordinator(
                    broker_pb2.FindCoordinatorRequest(group_ids=[group]), timeout=2
                )
            except Exception:
                continue
            [found] = reply.coordinators
            if found.error_code == 0 and found.node_id != old:
                return int(found.node_id)
        return None

    return wait_until(ask, timeout_s=30, interval_s=0.2, what=f"a new coordinator for {group}")
