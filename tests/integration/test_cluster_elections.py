"""Elections with real processes: fail-over time, preferred election, unclean election,
and a controller crash and restart under load."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import grpc
import pytest

from minikafka.errors import ErrorCode
from minikafka.record_batch import build_batch
from minikafka.v1 import broker_pb2_grpc, common_pb2, controller_pb2
from tests.support.cluster import running_cluster, wait_until
from tests.support.processes import free_port
from tests.support.wire import now_ms, produce, read_all

pytestmark = pytest.mark.integration


def elect(
    cluster_stub: broker_pb2_grpc.BrokerServiceStub,
    kind: controller_pb2.ElectionType.ValueType,
    topic: str,
) -> controller_pb2.ElectLeadersResponse:
    return cluster_stub.ElectLeaders(
        controller_pb2.ElectLeadersRequest(
            election_type=kind, partitions=[common_pb2.TopicPartition(topic=topic, partition=0)]
        ),
        timeout=30,
    )


def test_failover_then_preferred_election_moves_leadership_back(tmp_path: Path) -> None:
    with running_cluster(tmp_path) as cluster:
        cluster.create_topic("pref", rf=3, min_insync_replicas="2")
        preferred = cluster.wait_leader("pref")
        _, epoch_before, _ = cluster.leader_of("pref")
        produce(cluster.stub(preferred), "pref", build_batch([(now_ms(), None, b"a", None)]))
        killed = time.monotonic()
        cluster.brokers[preferred].kill()
        new_leader = cluster.wait_leader("pref", not_in=(preferred,), timeout_s=15)
        failover_s = time.monotonic() - killed
        # The session timeout is 1.5 s here; leadership must move within a few seconds.
        print(f"fail-over after kill -9: {failover_s:.2f}s")
        assert failover_s < 3, f"fail-over took {failover_s:.2f}s"
        _, epoch_after, _ = cluster.leader_of("pref")
        assert epoch_after > epoch_before
        cluster.brokers[preferred].start()
        cluster.wait_isr("pref", 0, sorted(cluster.brokers), timeout_s=30)
        assert cluster.leader_of("pref")[0] == new_leader  # no automatic rebalance here
        # Through the CLI, which prints kafka-leader-election.sh's lines.
        command = [sys.executable, "-m", "minikafka", "leader-election", "--election-type"]
        where = ["--topic", "pref", "--bootstrap-server", cluster.bootstrap]
        done = subprocess.run(
            [*command, "preferred", *where], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout == (
            "Successfully completed leader election (PREFERRED) for partitions pref-0\n"
        )
        assert cluster.wait_leader("pref", not_in=(new_leader,)) == preferred
        again = subprocess.run(
            [*command, "PREFERRED", *where], capture_output=True, text=True, timeout=60
        )
        assert (again.returncode, again.stdout) == (
            0,
            "Valid replica already elected for partitions pref-0\n",
        )
        values = [row[3] for row in read_all(cluster.stub(preferred), "pref")]
        assert values == [b"a"]


def test_unclean_election_only_when_allowed_and_loss_is_visible(tmp_path: Path) -> None:
    metrics_port = free_port()
    with running_cluster(
        tmp_path,
        controller_args=[
            "--session-timeout-ms",
            "1500",
            "--metrics-listen",
            f"127.0.0.1:{metrics_port}",
        ],
    ) as cluster:
        cluster.create_topic("u", rf=3, min_insync_replicas="1")
        leader = cluster.wait_leader("u")
        stale, other = (b for b in cluster.brokers if b != leader)
        assert (
            produce(
                cluster.stub(leader), "u", build_batch([(now_ms(), None, b"old", None)])
            ).error_code
            == ErrorCode.NONE
        )
        wait_until(
            lambda: len(read_all(cluster.stub(stale), "u")) == 1, what="stale replica to have 'old'"
        )
        cluster.brokers[stale].pause()
        cluster.wait_isr("u", 0, sorted([leader, other]), timeout_s=20)
        for value in (b"lost-1", b"lost-2"):
            assert (
                produce(
                    cluster.stub(leader), "u", build_batch([(now_ms(), None, value, None)])
                ).error_code
                == ErrorCode.NONE
            )
        cluster.brokers[leader].kill()
        cluster.brokers[other].kill()
        cluster.brokers[stale].resume()
        # Unclean disabled: no ISR member is alive, so the partition stays offline.
        wait_until(
            lambda: cluster.stub(stale) and cluster.leader_of("u")[0] == -1,
            timeout_s=20,
            what="offline partition",
        )
        refused = produce(
            cluster.stub(stale), "u", build_batch([(now_ms(), None, b"refused", None)])
        )
        assert refused.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        described = cluster.stub(stale).DescribeCluster(
            controller_pb2.DescribeClusterRequest(topics=["u"]), timeout=5
        )
        assert described.topics[0].partitions[0].state == "OFFLINE"
        # The operator allows it: the stale replica leads and the loss is visible.
        reply = cluster.stub(stale).AlterConfigs(
            controller_pb2.AlterConfigsRequest(
                topic="u", set={"unclean.leader.election.enable": "true"}
            ),
            timeout=30,
        )
        assert reply.error_code == ErrorCode.NONE, reply.error_message
        assert cluster.wait_leader("u", timeout_s=20) == stale
        described = cluster.stub(stale).DescribeCluster(
            controller_pb2.DescribeClusterRequest(topics=["u"]), timeout=5
        )
        assert described.topics[0].partitions[0].state == "RECOVERING"
        assert [row[3] for row in read_all(cluster.stub(stale), "u")] == [b"old"]
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as page:
            metrics = page.read().decode()
        assert "minikafka_controller_unclean_leader_elections_total 1.0" in metrics
        assert "WARNING" in cluster.controller.log_text()


def test_controller_crash_and_restart_under_load(tmp_path: Path) -> None:
    with running_cluster(tmp_path) as cluster:
        cluster.create_topic("cc", rf=3, min_insync_replicas="2")
        leader = cluster.wait_leader("cc")
        _, epoch_before, _ = cluster.leader_of("cc")
        acknowledged: dict[int, bytes] = {}
        stop = threading.Event()

        def writer() -> None:
            n = 0
            current = leader
            deadline = time.monotonic() + 60
            while not stop.is_set() and time.monotonic() < deadline:
                value = b"c%06d" % n
                try:
                    result = produce(
                        cluster.stub(current), "cc", build_batch([(now_ms(), None, value, None)])
                    )
                except grpc.RpcError:
                    result = None
                if result is not None and result.error_code == ErrorCode.NONE:
                    acknowledged[result.base_offset] = value
                    n += 1
                else:
                    try:
                        current = cluster.wait_leader("cc", timeout_s=10)
                    except TimeoutError:
                        return

        thread = threading.Thread(target=writer)
        thread.start()
        try:
            wait_until(lambda: len(acknowledged) >= 100, what="writes before the crash")
            cluster.controller.kill()
            # The data path does not need the controller: writes go on.
            count = len(acknowledged)
            wait_until(
                lambda: len(acknowledged) >= count + 100, what="writes while the controller is down"
            )
            cluster.controller.start()
            cluster.wait_active(3)
            # A leader change after the restart uses a new, higher leader epoch.
            cluster.brokers[leader].kill()
            new_leader = cluster.wait_leader("cc", not_in=(leader,), timeout_s=20)
            _, epoch_after, _ = cluster.leader_of("cc")
            assert epoch_after > epoch_before
            count = len(acknowledged)
            wait_until(
                lambda: len(acknowledged) >= count + 100, what="writes after the new election"
            )
        finally:
            stop.set()
            thread.join(timeout=60)
        rows = {
            offset: value for offset, _, _, value, _ in read_all(cluster.stub(new_leader), "cc")
        }
        lost = [offset for offset, value in acknowledged.items() if rows.get(offset) != value]
        assert not lost, f"acknowledged records lost at {lost[:10]}"
