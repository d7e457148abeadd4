"""Network partitions through the proxies: R10 (zombie leader) and R29 (clients cut off)."""

from __future__ import annotations

import time

import pytest

from tests.chaos.harness import LONG, Run, seeds
from tests.support.chaos_cluster import broker_name
from tests.support.chaos_proxy import CLIENT

pytestmark = pytest.mark.chaos

TOPIC = "n"


@pytest.mark.timeout(240)
@pytest.mark.parametrize("seed", seeds())
def test_r10_zombie_leader_cut_from_controller_and_followers(run: Run, seed: int) -> None:
    """Regression (found by this suite): clients took metadata from the isolated leader
    (first in their list), which still named itself leader, and never found the new one."""
    cluster = run.start_cluster()
    partitions = run.topic(TOPIC, partitions=1)
    workload = run.workload(partitions, producers=2, consumers=1).start()
    workload.wait_acked(20)
    leader, epoch, _ = cluster.leader_of(TOPIC, 0)
    others = {broker_name(b) for b in cluster.brokers if b != leader} | {"controller"}
    # The clients stay connected to the isolated leader.
    cluster.record("partition", side_a=[leader], side_b=sorted(others))
    cluster.net.partition({broker_name(leader)}, others)
    new_leader = cluster.wait_leader(TOPIC, 0, not_in=(leader,), timeout_s=20)
    assert cluster.leader_of(TOPIC, 0)[1] > epoch
    acked = workload.acked
    workload.wait_acked(acked + 10, timeout_s=45)  # clients find the new leader
    run.heal()
    result = run.converge_and_check(TOPIC, 1)
    assert new_leader != leader
    assert result.counts.get("lost-write", 0) == 0


@pytest.mark.timeout(240)
@pytest.mark.parametrize("seed", seeds())
def test_r29_clients_cut_off_from_the_cluster(run: Run, seed: int) -> None:
    cluster = run.start_cluster()
    partitions = run.topic(TOPIC, partitions=2)
    workload = run.workload(partitions, producers=2, consumers=1).start()
    workload.wait_acked(20)
    brokers = {broker_name(b) for b in cluster.brokers}
    cluster.record("partition", side_a=[CLIENT], side_b=sorted(brokers))
    cluster.net.partition({CLIENT}, brokers)
    time.sleep(30 if LONG else 6)  # the fault lasts this long
    run.heal()
    workload.wait_acked(workload.acked + 20, timeout_s=60)  # and the clients recover
    result = run.converge_and_check(TOPIC, 2)
    assert "duplicate" not in result.error_types  # I11 despite retries


@pytest.mark.timeout(120)
def test_send_to_a_blackholed_leader_fails_within_delivery_timeout(run: Run) -> None:
    """A record whose leader is unreachable (the link passes nothing) is failed by the
    producer within delivery_timeout_ms (plus a request timeout of slack), and the caller
    sees that delivery-timeout error. Regression (found by this suite): `result()` caught
    the batch's own KafkaTimeoutError (a TimeoutError) and reported it as the caller's
    wait expiring."""
    from client import Producer

    cluster = run.start_cluster()
    run.topic(TOPIC, partitions=1)
    leader, _, _ = cluster.leader_of(TOPIC, 0)
    delivery_timeout_ms, request_timeout_ms = 5000, 2000
    with Producer(
        bootstrap_servers=cluster.client_bootstrap,
        acks="all",
        request_timeout_ms=request_timeout_ms,
        delivery_timeout_ms=delivery_timeout_ms,
        max_block_ms=delivery_timeout_ms,
    ) as producer:
        producer.send(TOPIC, b"warm-up", partition=0).result(timeout=10)
        cluster.record("block", src=CLIENT, dst=leader)
        cluster.net.block(CLIENT, broker_name(leader))
        started = time.monotonic()
        future = producer.send(TOPIC, b"into the void", partition=0)
        wait_s = (delivery_timeout_ms + 3 * request_timeout_ms) / 1000
        with pytest.raises(TimeoutError) as failure:
            future.result(timeout=wait_s)
        elapsed_s = time.monotonic() - started
        cluster.net.heal()
    assert elapsed_s < (delivery_timeout_ms + 2 * request_timeout_ms) / 1000
    assert "delivery_timeout_ms" in str(failure.value), (
        f"the delivery-timeout error was replaced after {elapsed_s:.1f} s: {failure.value}"
    )
