"""Controller quorum faults under the queue workload (issue 18): Q01-Q05.

Three controllers (a Raft quorum, `c1..c3` in the proxy net) and three brokers; topic `q`
has two partitions, RF 3, min.insync.replicas 2, written with acks=all. Every scenario
checks, besides the history checker's verdict (zero acknowledged loss):

- no metadata loss: every topic, config and partition epoch seen before the fault is
  there afterwards (epochs equal or larger), on whichever controller is active;
- epochs only grow: the controller epoch (= the Raft epoch) of every active controller
  observed is larger than the one before it, and each fail-over issues a new one;
- a controller fail-over alone fences no broker and moves no partition leader.
"""

from __future__ import annotations

import random
import time
from typing import Any

import grpc
import pytest

from minikafka.errors import ErrorCode
from minikafka.v1 import controller_pb2
from tests.chaos.harness import Run, seeds
from tests.support.chaos_cluster import ChaosCluster, controller_name
from tests.support.cluster import wait_until

pytestmark = pytest.mark.chaos

TOPIC = "q"
PARTITIONS = 2
CONTROLLERS = 3
FENCING = ("missed heartbeats", "heartbeat stream broke: fencing")

Metadata = dict[str, Any]


def start(run: Run) -> ChaosCluster:
    cluster = run.start_cluster(controllers=CONTROLLERS)
    partitions = run.topic(TOPIC, partitions=PARTITIONS)
    run.workload(partitions, producers=2, consumers=1).start().wait_acked(30)
    return cluster


def more_acks(run: Run, count: int = 20) -> None:
    workload = run.workloads[0]
    workload.wait_acked(workload.acked + count, timeout_s=45)


def metadata(cluster: ChaosCluster) -> Metadata:
    """Topics (configs, per partition: leader, leader epoch, partition epoch) and the
    controller epoch, as the active controller describes them."""
    reply = cluster.describe()
    return {
        "controller_epoch": reply.controller_epoch,
        "controller_id": reply.controller_id,
        "topics": {
            topic.name: {
                "configs": dict(topic.configs),
                "partitions": {
                    p.partition: (p.leader, p.leader_epoch, p.partition_epoch)
                    for p in topic.partitions
                },
            }
            for topic in reply.topics
        },
    }


def assert_no_metadata_loss(before: Metadata, after: Metadata) -> None:
    """Every topic and config survives; partition epochs and the controller epoch only grow."""
    assert after["controller_epoch"] >= before["controller_epoch"]
    for name, topic in before["topics"].items():
        assert name in after["topics"], f"topic {name} lost"
        assert after["topics"][name]["configs"] == topic["configs"], f"configs of {name}"
        for partition, (_, leader_epoch, partition_epoch) in topic["partitions"].items():
            _, new_leader_epoch, new_partition_epoch = after["topics"][name]["partitions"][
                partition
            ]
            assert new_leader_epoch >= leader_epoch, f"{name}-{partition} leader epoch"
            assert new_partition_epoch >= partition_epoch, f"{name}-{partition} partition epoch"


def leaders(meta: Metadata) -> dict[tuple[str, int], tuple[int, int]]:
    return {
        (name, partition): (leader, leader_epoch)
        for name, topic in meta["topics"].items()
        for partition, (leader, leader_epoch, _) in topic["partitions"].items()
    }


def fencing_lines(cluster: ChaosCluster) -> list[str]:
    lines: list[str] = []
    for process in cluster.controllers.values():
        if process.log_path.exists():
            lines += [
                line
                for line in process.log_text().splitlines()
                if any(marker in line for marker in FENCING)
            ]
    return lines


class EpochWatch:
    """The controller epochs of the active controllers seen, in order: each new active
    controller must announce a larger one."""

    def __init__(self, cluster: ChaosCluster) -> None:
        self.cluster = cluster
        self.seen: list[tuple[int, int]] = []  # (controller id, epoch)
        self.observe()

    def observe(self, *, not_in: tuple[int, ...] = ()) -> int:
        node_id = self.cluster.active_controller(not_in=not_in)
        epoch = self.cluster.quorum_of(node_id).leader_epoch
        if not self.seen or self.seen[-1] != (node_id, epoch):
            assert not self.seen or epoch > self.seen[-1][1], f"epoch went back: {self.seen}"
            self.seen.append((node_id, epoch))
        return node_id


def create_topic(cluster: ChaosCluster, name: str, **configs: str) -> None:
    """CreateTopics at the active controller (asking again if it moved meanwhile)."""

    def created() -> bool:
        try:
            reply = cluster.controller_stub().CreateTopics(
                controller_pb2.CreateTopicsRequest(
                    topics=[
                        controller_pb2.CreatableTopic(
                            name=name, num_partitions=1, replication_factor=3, configs=configs
                        )
                    ]
                ),
                timeout=10,
            )
        except grpc.RpcError:
            return False
        code = reply.topics[0].error_code
        return code in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS)

    cluster.record("create-topic", topic=name)
    wait_until(created, timeout_s=30, what=f"topic {name} created")
    cluster.wait_leader(name, 0)


def restart_controllers(cluster: ChaosCluster, rng: random.Random) -> None:
    dead = [node_id for node_id, p in cluster.controllers.items() if not p.alive()]
    rng.shuffle(dead)
    for node_id in dead:
        cluster.start_controller(node_id)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("seed", seeds())
def test_q01_active_controller_kill_under_load(run: Run, seed: int) -> None:
    cluster = start(run)
    create_topic(cluster, "configured", **{"retention.ms": "3600000"})
    epochs = EpochWatch(cluster)
    before = metadata(cluster)
    fenced_before = len(fencing_lines(cluster))
    active = epochs.observe()
    cluster.kill_controller(active)
    more_acks(run, 10)  # the data plane does not wait for the quorum
    successor = epochs.observe(not_in=(active,))
    assert successor != active
    create_topic(cluster, "after-fail-over")  # metadata changes again
    after = metadata(cluster)
    assert_no_metadata_loss(before, after)
    assert after["controller_id"] == successor
    assert leaders(after).items() >= leaders(before).items(), "a leader moved"
    more_acks(run)
    time.sleep(2.0)  # a full session after the fail-over: nobody must have been fenced
    assert fencing_lines(cluster)[fenced_before:] == []
    # An election under the new controller: a partition leader dies.
    leader, epoch, _ = cluster.leader_of(TOPIC, 0)
    cluster.kill(leader)
    cluster.wait_leader(TOPIC, 0, not_in=(leader,))
    assert cluster.leader_of(TOPIC, 0)[1] > epoch
    restart_controllers(cluster, run.rng)
    run.converge_and_check(TOPIC, PARTITIONS)
    assert_no_metadata_loss(after, metadata(cluster))
    epochs.observe()


@pytest.mark.timeout(240)
@pytest.mark.parametrize("seed", seeds())
def test_q02_active_controller_and_partition_leader_killed_together(run: Run, seed: int) -> None:
    cluster = start(run)
    epochs = EpochWatch(cluster)
    before = metadata(cluster)
    active = epochs.observe()
    leader, epoch, isr = cluster.leader_of(TOPIC, 0)
    cluster.kill_controller(active)
    cluster.kill(leader)
    new_leader = cluster.wait_leader(TOPIC, 0, not_in=(leader,), timeout_s=45)
    assert new_leader in isr  # a clean election, by the new active controller
    assert cluster.leader_of(TOPIC, 0)[1] > epoch
    assert epochs.observe(not_in=(active,)) != active
    more_acks(run)
    assert_no_metadata_loss(before, metadata(cluster))
    restart_controllers(cluster, run.rng)
    run.converge_and_check(TOPIC, PARTITIONS)
    epochs.observe()


@pytest.mark.timeout(240)
@pytest.mark.parametrize("seed", seeds())
def test_q03_minority_controller_cut_off(run: Run, seed: int) -> None:
    """The active controller is cut off from the other controllers and the brokers (still
    running): the majority elects a successor, the brokers follow it, metadata changes go
    on; the cut-off controller cannot commit anything. Healed, it follows and catches up."""
    cluster = start(run)
    epochs = EpochWatch(cluster)
    before = metadata(cluster)
    fenced_before = len(fencing_lines(cluster))
    active = epochs.observe()
    cluster.record("isolate-controller", controller=active)
    cluster.net.isolate(controller_name(active))
    successor = epochs.observe(not_in=(active,))
    assert successor != active
    wait_until(
        lambda: not cluster.quorum_of(active).active,
        timeout_s=10,
        what="the cut-off controller stops being active (check quorum)",
    )
    isolated_hw = cluster.quorum_of(active).high_watermark
    create_topic(cluster, "during-partition")
    more_acks(run)
    assert cluster.quorum_of(active).high_watermark == isolated_hw  # it committed nothing
    assert "during-partition" in metadata(cluster)["topics"]
    assert leaders(metadata(cluster)).items() >= leaders(before).items(), "a leader moved"
    assert fencing_lines(cluster)[fenced_before:] == []
    cluster.heal_network()
    leader_hw = cluster.quorum_of(successor).high_watermark
    wait_until(
        lambda: cluster.quorum_of(active).high_watermark >= leader_hw,
        timeout_s=20,
        what="the healed controller catches up",
    )
    assert cluster.quorum_of(active).leader_id == successor
    run.converge_and_check(TOPIC, PARTITIONS)
    assert_no_metadata_loss(before, metadata(cluster))
    epochs.observe()


@pytest.mark.timeout(240)
@pytest.mark.parametrize("seed", seeds())
def test_q04_all_controllers_restarted(run: Run, seed: int) -> None:
    cluster = start(run)
    create_topic(cluster, "configured", **{"cleanup.policy": "delete", "retention.ms": "60000"})
    epochs = EpochWatch(cluster)
    before = metadata(cluster)
    fenced_before = len(fencing_lines(cluster))
    for node_id in cluster.controllers:
        cluster.kill_controller(node_id)
    more_acks(run, 10)  # leaders keep serving without any controller
    restart_controllers(cluster, run.rng)
    epochs.observe()
    cluster.wait_active(3)
    after = metadata(cluster)
    assert_no_metadata_loss(before, after)
    assert after["controller_epoch"] > before["controller_epoch"]
    assert leaders(after).items() >= leaders(before).items(), "a leader moved"
    more_acks(run)
    time.sleep(2.0)  # a full session after the restart
    assert fencing_lines(cluster)[fenced_before:] == []
    create_topic(cluster, "after-restart")
    run.converge_and_check(TOPIC, PARTITIONS)
    assert_no_metadata_loss(after, metadata(cluster))


@pytest.mark.timeout(240)
@pytest.mark.parametrize("seed", seeds())
def test_q05_one_voter_directory_wiped(run: Run, seed: int) -> None:
    """The active controller loses its disk. It comes back empty, may not vote until it has
    caught up, then does: the other original voter can then die and the two left still
    hold every topic, config and epoch."""
    cluster = start(run)
    create_topic(cluster, "configured", **{"retention.ms": "7200000"})
    epochs = EpochWatch(cluster)
    before = metadata(cluster)
    wiped = epochs.observe()
    cluster.kill_controller(wiped)
    cluster.wipe_controller(wiped)
    successor = epochs.observe(not_in=(wiped,))
    create_topic(cluster, "while-wiped")
    cluster.start_controller(wiped)
    leader_hw = cluster.quorum_of(successor).high_watermark
    wait_until(
        lambda: (
            cluster.quorum_of(wiped).can_vote
            and cluster.quorum_of(wiped).high_watermark >= leader_hw
        ),
        timeout_s=30,
        what="the wiped voter caught up (and may vote again)",
    )
    assert "(votes once caught up from the leader)" in cluster.controllers[wiped].log_text()
    # Now it must be able to stand in for the active controller's vote.
    cluster.kill_controller(successor)
    epochs.observe(not_in=(successor,))
    after = metadata(cluster)
    assert_no_metadata_loss(before, after)
    assert "while-wiped" in after["topics"]
    more_acks(run)
    restart_controllers(cluster, run.rng)
    run.converge_and_check(TOPIC, PARTITIONS)
    assert_no_metadata_loss(after, metadata(cluster))
