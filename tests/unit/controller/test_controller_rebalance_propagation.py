"""Preferred-replica imbalance, the propagation plan, and session liveness."""

from __future__ import annotations

import pytest

from controller.liveness import Liveness
from controller.propagation import plan_propagation
from controller.rebalance import partitions_to_rebalance, preferred_replica_imbalance
from controller.state_machine import (
    AlterPartitionItem,
    NewTopic,
    alter_configs,
    alter_partition,
    create_topics,
    delete_topics,
    fence_broker,
    heartbeat,
    register_broker,
)
from minikafka.grpc_options import RECONNECT_DELAY_MAX_MS
from tests.unit.controller.controller_harness import Harness


def moved_leaders_cluster() -> tuple[Harness, int]:
    """Three brokers, 6 partitions RF 3; one broker bounced so it leads none of its own."""
    harness = Harness()
    harness.start_brokers(1, 2, 3)
    harness.create("t", partitions=6, rf=3)
    victim = 1
    harness.commit(fence_broker(harness.state, harness.settings, broker_id=victim, reason="x"))
    harness.register(victim)
    harness.unfence(victim)
    for key, part in sorted(harness.state.partitions.items()):
        harness.commit(
            alter_partition(
                harness.state,
                harness.settings,
                broker_id=part.leader,
                broker_epoch=harness.state.brokers[part.leader].broker_epoch,
                items=[
                    AlterPartitionItem(
                        topic=key[0],
                        partition=key[1],
                        leader_epoch=part.leader_epoch,
                        partition_epoch=part.partition_epoch,
                        new_isr=part.replicas,
                        member_epochs={
                            b: harness.state.brokers[b].broker_epoch for b in part.replicas
                        },
                    )
                ],
            )
        )
    return harness, victim


def test_imbalance_detected_per_broker() -> None:
    harness, victim = moved_leaders_cluster()
    preferring_victim = sorted(
        key for key, part in harness.state.partitions.items() if part.replicas[0] == victim
    )
    assert preferring_victim
    assert preferred_replica_imbalance(harness.state) == len(preferring_victim)
    assert partitions_to_rebalance(harness.state, imbalance_percentage=10) == preferring_victim
    # 100%: never above the threshold.
    assert partitions_to_rebalance(harness.state, imbalance_percentage=100) == []


def test_no_rebalance_to_fenced_or_out_of_sync_preferred() -> None:
    harness, victim = moved_leaders_cluster()
    harness.commit(fence_broker(harness.state, harness.settings, broker_id=victim, reason="x"))
    assert partitions_to_rebalance(harness.state, imbalance_percentage=0) == []


def test_plan_for_new_topic() -> None:
    harness = Harness()
    harness.start_brokers(1, 2, 3)
    old = harness.state
    result = create_topics(
        old,
        harness.settings,
        topics=[NewTopic(name="t", num_partitions=2, replication_factor=2)],
        validate_only=False,
    )
    harness.commit(result)
    plan = plan_propagation(old, harness.state, result.records)
    assert plan.update_metadata
    assert plan.new_partitions == {("t", 0), ("t", 1)}
    expected: dict[int, set[tuple[str, int]]] = {}
    for key, part in harness.state.partitions.items():
        for replica in part.replicas:
            expected.setdefault(replica, set()).add(key)
    assert plan.leader_and_isr == expected


def test_plan_for_config_change_delete_and_registration() -> None:
    harness = Harness()
    harness.start_brokers(1, 2)
    harness.create("t", rf=2)
    state = harness.state
    result = alter_configs(
        state,
        harness.settings,
        topic="t",
        set_configs={"retention.ms": "5"},
        delete_configs=(),
        validate_only=False,
    )
    harness.commit(result)
    plan = plan_propagation(state, harness.state, result.records)
    assert plan.leader_and_isr == {1: {("t", 0)}, 2: {("t", 0)}}
    assert not plan.full_sync
    state = harness.state
    deleted = delete_topics(state, names=["t"])
    harness.commit(deleted)
    plan = plan_propagation(state, harness.state, deleted.records)
    assert plan.stop_replica == {1: {("t", 0): 0}, 2: {("t", 0): 0}}
    assert plan.leader_and_isr == {}
    state = harness.state
    registered = register_broker(
        state,
        harness.settings,
        broker_id=2,
        host="h",
        port=1,
        rack="",
        incarnation_id="new",
        previous_broker_epoch=state.brokers[2].broker_epoch,
        directory_id="dir-2",
        session_alive=False,
    )
    harness.commit(registered)
    assert plan_propagation(state, harness.state, registered.records).full_sync == {2}
    # An unfence (same epoch) is no full sync, only UpdateMetadata.
    state = harness.state
    unfenced = heartbeat(
        state,
        harness.settings,
        broker_id=2,
        broker_epoch=state.brokers[2].broker_epoch,
        want_shutdown=False,
        caught_up_offset=state.metadata_offset,
    )
    harness.commit(unfenced)
    plan = plan_propagation(state, harness.state, unfenced.records)
    assert not plan.full_sync
    assert plan.update_metadata


def test_liveness_deadlines() -> None:
    liveness = Liveness(session_timeout_ms=100)
    assert liveness.touch(1, now_ms=0)  # new session
    assert not liveness.touch(1, now_ms=50)  # extended
    assert liveness.is_alive(1, now_ms=149)
    assert not liveness.is_alive(1, now_ms=150)
    assert liveness.expired(now_ms=150) == [1]
    assert liveness.touch(1, now_ms=200)  # revived after expiry
    liveness.forget(1)
    assert liveness.alive(now_ms=201) == frozenset()


@pytest.mark.parametrize(
    ("elapsed_ms", "alive"),
    [
        pytest.param(1_499, True, id="within-the-session"),
        pytest.param(1_500, True, id="a-session-is-not-enough-after-a-restart"),
        pytest.param(2_699, True, id="session-plus-reconnect-delay"),
        pytest.param(2_700, False, id="expired"),
    ],
)
def test_a_new_controllers_grace_covers_a_reconnect_back_off(elapsed_ms: int, alive: bool) -> None:
    """A broker whose channel backed off while no controller answered needs up to one
    back-off (+ jitter) to try again: a new controller's grace is a session plus that
    (R06 under load: a live broker fenced 1.5 s after the controller came back)."""
    liveness = Liveness(session_timeout_ms=1_500)
    liveness.start_grace(7, 10_000, extra_ms=RECONNECT_DELAY_MAX_MS)
    assert RECONNECT_DELAY_MAX_MS == 1_200
    assert liveness.is_alive(7, 10_000 + elapsed_ms) is alive
