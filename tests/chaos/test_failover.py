"""Leader and controller faults under the queue workload: R02-R06, R20, R32.

Every scenario ends the same way: heal, wait until every partition has a full ISR,
read everything with fresh clients (final polls) and run the checker; then all replicas
must hold identical logs. R03 and R06 also run with TLS and mutual TLS on every listener
and link (`..._tls`): the same faults, workload and checks over encrypted connections.
"""

from __future__ import annotations

import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.chaos.harness import LONG, Run, seeds
from tests.support.cluster import wait_until

pytestmark = pytest.mark.chaos

TOPIC = "q"
PARTITIONS = 2


def start(run: Run, **cluster_args: object) -> None:
    cluster = run.start_cluster(**cluster_args)  # type: ignore[arg-type]
    if cluster_args.get("tls"):
        # The run really is encrypted: a plaintext peer is refused by brokers and proxies.
        for address in [cluster.brokers[1].address, cluster.proxy[1]]:
            assert not answers_plaintext(address), f"{address} answered in plaintext"
    partitions = run.topic(TOPIC, partitions=PARTITIONS)
    run.workload(partitions, producers=2, consumers=1).start().wait_acked(30)


def answers_plaintext(address: str) -> bool:
    """Whether the server at `address` answers a health check over plaintext."""
    with grpc.insecure_channel(address) as channel:
        try:
            health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=2)
        except grpc.RpcError:
            return False
    return True


def more_acks(run: Run, count: int = 20) -> None:
    """Progress under (or after) the fault: `count` more acknowledged sends."""
    workload = run.workloads[0]
    workload.wait_acked(workload.acked + count, timeout_s=45)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("seed", seeds())
def test_r02_leader_clean_shutdown(run: Run, seed: int) -> None:
    start(run)
    cluster = run.cluster
    assert cluster is not None
    leader, epoch, isr = cluster.leader_of(TOPIC, 0)
    assert cluster.terminate(leader) == 0
    new_leader = cluster.wait_leader(TOPIC, 0, not_in=(leader,))
    assert new_leader in isr  # leadership moved to an ISR member
    assert cluster.leader_of(TOPIC, 0)[1] > epoch  # I6
    more_acks(run)
    run.converge_and_check(TOPIC, PARTITIONS)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("seed", seeds())
def test_r03_leader_hard_shutdown(run: Run, seed: int) -> None:
    leader_hard_shutdown(run)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("seed", seeds())
def test_r03_leader_hard_shutdown_tls(run: Run, seed: int) -> None:
    leader_hard_shutdown(run, tls=True)


def leader_hard_shutdown(run: Run, *, tls: bool = False) -> None:
    """R03: kill -9 of a partition leader under load."""
    start(run, tls=tls)
    cluster = run.cluster
    assert cluster is not None
    leader, epoch, isr = cluster.leader_of(TOPIC, 0)
    cluster.kill(leader)
    new_leader = cluster.wait_leader(TOPIC, 0, not_in=(leader,))
    assert new_leader in isr  # clean election only (I9)
    assert cluster.leader_of(TOPIC, 0)[1] > epoch
    more_acks(run)
    run.converge_and_check(TOPIC, PARTITIONS)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("seed", seeds())
def test_r04_leader_clean_bounce_x5(run: Run, seed: int) -> None:
    start(run)
    cluster = run.cluster
    assert cluster is not None
    for _ in range(5):
        leader, _, _ = cluster.leader_of(TOPIC, 0)
        assert cluster.terminate(leader) == 0
        cluster.wait_leader(TOPIC, 0, not_in=(leader,))
        cluster.start_broker(leader)
        cluster.wait_full_isr(TOPIC, PARTITIONS)
        more_acks(run, 10)
    result = run.converge_and_check(TOPIC, PARTITIONS)
    assert "duplicate" not in result.error_types  # I11


@pytest.mark.timeout(300)
@pytest.mark.parametrize("seed", seeds())
def test_r05_leader_hard_bounce_x5(run: Run, seed: int) -> None:
    start(run)
    cluster = run.cluster
    assert cluster is not None
    for _ in range(5):
        leader, _, _ = cluster.leader_of(TOPIC, 0)
        cluster.hard_bounce(leader)  # kill -9, wait for session expiry, restart
        cluster.wait_full_isr(TOPIC, PARTITIONS)  # it rejoins only after catching up
        more_acks(run, 10)
    run.converge_and_check(TOPIC, PARTITIONS)


def max_epochs(run: Run) -> dict[int, int]:
    assert run.cluster is not None
    return {p: run.cluster.leader_of(TOPIC, p)[1] for p in range(PARTITIONS)}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("seed", seeds())
def test_r06_controller_kill_during_load(run: Run, seed: int) -> None:
    controller_kill_during_load(run)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("seed", seeds())
def test_r06_controller_kill_during_load_tls(run: Run, seed: int) -> None:
    controller_kill_during_load(run, tls=True)


def controller_kill_during_load(run: Run, *, tls: bool = False) -> None:
    """R06: kill -9 of the controller under load, restart, then a leader election."""
    start(run, tls=tls)
    cluster = run.cluster
    assert cluster is not None
    before = max_epochs(run)
    cluster.kill_controller()
    more_acks(run, 10)  # leaders keep serving while the controller is down
    cluster.start_controller()
    cluster.wait_active(3)
    more_acks(run, 10)
    # An election after the restart issues an epoch never issued before (persisted).
    leader, _, _ = cluster.leader_of(TOPIC, 0)
    cluster.kill(leader)
    cluster.wait_leader(TOPIC, 0, not_in=(leader,))
    assert max_epochs(run)[0] > before[0]
    more_acks(run)
    run.converge_and_check(TOPIC, PARTITIONS)
    assert all(cluster.leader_of(TOPIC, p)[0] >= 0 for p in range(PARTITIONS))


SESSION_TIMEOUT_S = 1.5


@pytest.mark.timeout(300)
@pytest.mark.parametrize("seed", seeds())
def test_r06_controller_restart_does_not_fence_live_brokers(run: Run, seed: int) -> None:
    """Regression (found by this suite): with gRPC's default reconnect back-off the
    brokers reconnected to a controller that had been down a few seconds only after its
    session deadline, so it fenced the live brokers and dropped them from every ISR."""
    start(run)
    cluster = run.cluster
    assert cluster is not None
    for _ in range(2):
        cluster.kill_controller()
        time.sleep(8)  # the controller stays down for 8 s
        cluster.start_controller()
        time.sleep(SESSION_TIMEOUT_S + 1.0)  # observation window: one session and a margin
        fenced = [
            line
            for line in cluster.controller.log_text().splitlines()
            if "missed heartbeats" in line
        ]
        assert fenced == [], "live brokers fenced after the controller restart:\n" + "\n".join(
            fenced
        )
    more_acks(run)
    run.converge_and_check(TOPIC, PARTITIONS)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("seed", seeds())
def test_r20_process_pauses(run: Run, seed: int) -> None:
    """SIGSTOP the leader for 2x the session timeout, then a follower, then the controller."""
    start(run)
    cluster = run.cluster
    assert cluster is not None
    leader, epoch, _ = cluster.leader_of(TOPIC, 0)
    cluster.pause(leader)
    cluster.wait_leader(TOPIC, 0, not_in=(leader,))  # >= session timeout later
    cluster.wait_fenced(leader)
    assert cluster.leader_of(TOPIC, 0)[1] > epoch
    cluster.resume(leader)
    cluster.wait_full_isr(TOPIC, PARTITIONS)
    more_acks(run)
    current, _, _ = cluster.leader_of(TOPIC, 0)
    follower = next(b for b in cluster.brokers if b != current)
    cluster.pause(follower)
    more_acks(run)  # the ISR shrinks and writes go on
    cluster.resume(follower)
    cluster.wait_full_isr(TOPIC, PARTITIONS)
    cluster.record("pause-controller")
    cluster.controller.pause()
    more_acks(run, 10)  # leaders keep serving without the controller
    cluster.record("resume-controller")
    cluster.controller.resume()
    run.converge_and_check(TOPIC, PARTITIONS)


@pytest.mark.timeout(400)
@pytest.mark.parametrize("seed", seeds())
def test_r32_preferred_leader_elections_under_load(run: Run, seed: int) -> None:
    start(run)
    cluster = run.cluster
    assert cluster is not None
    rounds = 10 if LONG else 5
    for _ in range(rounds):
        preferred, epoch, _ = cluster.leader_of(TOPIC, 0)
        assert cluster.terminate(preferred) == 0  # controlled shutdown moves leadership
        cluster.wait_leader(TOPIC, 0, not_in=(preferred,))
        cluster.start_broker(preferred)
        cluster.wait_full_isr(TOPIC, PARTITIONS)
        moved_epoch = cluster.leader_of(TOPIC, 0)[1]
        assert cluster.elect(TOPIC, 0, "preferred") == 0
        wait_until(
            lambda p=preferred: cluster.leader_of(TOPIC, 0)[0] == p,  # type: ignore[misc]
            what="the preferred replica leading again",
        )
        assert cluster.leader_of(TOPIC, 0)[1] == moved_epoch + 1  # one leader per epoch
        assert moved_epoch > epoch
        more_acks(run, 5)
    run.converge_and_check(TOPIC, PARTITIONS)
