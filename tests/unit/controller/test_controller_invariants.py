"""Properties over random operation sequences, and the purity of the controller's core."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.model import NO_LEADER, ClusterState, PartitionKey
from controller.state_machine import (
    AlterPartitionItem,
    ElectionType,
    alter_partition,
    controlled_shutdown,
    elect_leaders,
    fence_broker,
)
from tests.unit.controller.controller_harness import Harness

BROKERS = (1, 2, 3, 4)

operation = st.one_of(
    st.tuples(st.just("fence"), st.sampled_from(BROKERS)),
    st.tuples(st.just("restart-clean"), st.sampled_from(BROKERS)),
    st.tuples(st.just("restart-unclean"), st.sampled_from(BROKERS)),
    st.tuples(st.just("shutdown"), st.sampled_from(BROKERS)),
    st.tuples(st.just("expand"), st.integers(0, 5)),
    st.tuples(st.just("shrink"), st.integers(0, 5)),
    st.tuples(st.just("preferred"), st.integers(0, 5)),
    st.tuples(st.just("unclean"), st.integers(0, 5)),
)


def check_invariants(old: ClusterState, new: ClusterState) -> None:
    for key, part in new.partitions.items():
        if not part.isr:  # only after the last member restarted without proof of intactness
            assert part.leader == NO_LEADER, key
        assert set(part.isr) <= set(part.replicas)
        if part.leader != NO_LEADER:
            assert part.leader in part.isr
            assert not new.brokers[part.leader].fenced
        before = old.partitions.get(key)
        if before is not None:
            assert part.leader_epoch >= before.leader_epoch
            assert part.partition_epoch >= before.partition_epoch
            if part != before:
                assert part.partition_epoch > before.partition_epoch
            if part.leader != before.leader:
                assert part.leader_epoch > before.leader_epoch
    epochs = [b.broker_epoch for b in new.brokers.values()]
    assert len(epochs) == len(set(epochs))
    assert new.last_broker_epoch >= max(epochs, default=0)


def apply(harness: Harness, name: str, argument: int) -> None:
    state = harness.state
    keys: list[PartitionKey] = sorted(state.partitions)
    key = keys[argument % len(keys)]
    part = state.partitions[key]
    if name == "fence":
        harness.commit(fence_broker(state, harness.settings, broker_id=argument, reason="test"))
    elif name in ("restart-clean", "restart-unclean"):
        harness.commit(fence_broker(state, harness.settings, broker_id=argument, reason="test"))
        harness.register(argument, clean_shutdown=name == "restart-clean")
        harness.unfence(argument)
    elif name == "shutdown":
        broker = state.brokers[argument]
        harness.commit(
            controlled_shutdown(
                state, harness.settings, broker_id=argument, broker_epoch=broker.broker_epoch
            )
        )
    elif name in ("expand", "shrink") and part.leader != NO_LEADER:
        eligible = state.eligible_brokers()
        if name == "expand":
            new_isr = tuple(r for r in part.replicas if r in eligible or r in part.isr)
        else:
            new_isr = (part.leader,)
        harness.commit(
            alter_partition(
                state,
                harness.settings,
                broker_id=part.leader,
                broker_epoch=state.brokers[part.leader].broker_epoch,
                items=[
                    AlterPartitionItem(
                        topic=key[0],
                        partition=key[1],
                        leader_epoch=part.leader_epoch,
                        partition_epoch=part.partition_epoch,
                        new_isr=new_isr,
                    )
                ],
            )
        )
    elif name in ("preferred", "unclean"):
        election_type = ElectionType.PREFERRED if name == "preferred" else ElectionType.UNCLEAN
        harness.commit(
            elect_leaders(state, harness.settings, election_type=election_type, partitions=[key])
        )


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(
    operations=st.lists(operation, max_size=30),
    unclean_allowed=st.booleans(),
)
def test_invariants_hold_for_any_operation_sequence(
    operations: list[tuple[str, int]], unclean_allowed: bool
) -> None:
    harness = Harness()
    harness.start_brokers(*BROKERS)
    harness.create(
        "a",
        partitions=3,
        rf=3,
        configs={"unclean.leader.election.enable": "true" if unclean_allowed else "false"},
    )
    harness.create("b", partitions=3, rf=2)
    for name, argument in operations:
        before = harness.state
        apply(harness, name, argument)
        check_invariants(before, harness.state)


PURE_MODULES = [
    "election",
    "partition_change",
    "placement",
    "offline_replicas",
    "rebalance",
    "state_machine",
    "propagation",
    "records",
    "model",
]
FORBIDDEN = {"asyncio", "time", "random", "socket", "threading", "grpc", "minikafka.v1", "os"}


@pytest.mark.parametrize("module", PURE_MODULES)
def test_core_modules_are_pure(module: str) -> None:
    source = (Path(__file__).resolve().parents[3] / "controller" / f"{module}.py").read_text()
    imported: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module)
    offending = {
        name for name in imported for bad in FORBIDDEN if name == bad or name.startswith(bad + ".")
    }
    assert not offending, f"controller/{module}.py imports {sorted(offending)}"
