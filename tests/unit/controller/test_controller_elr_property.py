"""KIP-966 as a property: whatever the sequence of fences, unfences, clean and unclean
restarts, ISR changes and elections, a partition never elects (without calling it unclean)
a leader that misses a committed record.

The controller's pure handlers run against a model of what each broker's log holds: a
record is committed when the leader writes it while the ISR has at least
min.insync.replicas members (the brokers' strict min ISR rule), and it then reaches every
ISR member; followers catch up from the leader; an unclean restart may lose any suffix of
a broker's log (no fsync). The negative control runs the same property with eligible
leader replicas off and the old "last replica standing" rule, and must find a violation.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.election import UncleanRecoveryStrategy
from controller.model import NO_LEADER, PartitionRegistration
from controller.partition_change import ElectionKind
from controller.state_machine import (
    AlterPartitionItem,
    ElectionType,
    Settings,
    alter_partition,
    elect_leaders,
    fence_broker,
)
from tests.unit.controller.controller_harness import Harness

BROKERS = (1, 2, 3, 4)
KEY = ("t", 0)

operation = st.one_of(
    st.tuples(st.just("write"), st.integers(1, 3)),
    st.tuples(st.just("catch-up"), st.sampled_from(BROKERS)),
    st.tuples(st.just("fence"), st.sampled_from(BROKERS)),
    st.tuples(st.just("unfence"), st.sampled_from(BROKERS)),
    st.tuples(st.just("restart-clean"), st.sampled_from(BROKERS)),
    st.tuples(st.just("restart-unclean"), st.sampled_from(BROKERS)),
    st.tuples(st.just("shrink"), st.sampled_from(BROKERS)),
    st.tuples(st.just("expand"), st.sampled_from(BROKERS)),
    st.tuples(st.just("preferred"), st.just(0)),
    st.tuples(st.just("unclean"), st.just(0)),
)


class Model:
    """The controller (real handlers) and what each broker's log holds of the one
    history the partition has had since its last unclean election."""

    def __init__(self, settings: Settings, min_isr: int, seed: int) -> None:
        self.harness = Harness(settings)
        self.harness.start_brokers(*BROKERS)
        self.harness.create("t", rf=3, configs={"min.insync.replicas": str(min_isr)})
        self.min_isr = min_isr
        self.rng = random.Random(seed)
        self.committed = 0
        self.holds = dict.fromkeys(BROKERS, 0)

    @property
    def part(self) -> PartitionRegistration:
        return self.harness.part(KEY)

    def apply(self, name: str, arg: int) -> None:
        h = self.harness
        part = self.part
        state = h.state
        fenced = state.brokers[arg].fenced if arg in state.brokers else True
        if name == "write" and part.leader != NO_LEADER and len(part.isr) >= self.min_isr:
            self.committed = self.holds[part.leader] + arg
            for member in part.isr:
                self.holds[member] = self.committed
        elif name == "catch-up" and part.leader != NO_LEADER and not fenced:
            self.holds[arg] = max(self.holds[arg], self.holds[part.leader])
        elif name == "fence":
            h.commit(fence_broker(state, h.settings, broker_id=arg, reason="model"))
        elif name == "unfence" and fenced:
            h.unfence(arg)
        elif name in ("restart-clean", "restart-unclean"):
            h.commit(fence_broker(state, h.settings, broker_id=arg, reason="model"))
            if name == "restart-unclean":  # the unflushed tail is gone
                self.holds[arg] = self.rng.randint(0, self.holds[arg])
            h.register(arg, clean_shutdown=name == "restart-clean")
            h.unfence(arg)
        elif name in ("shrink", "expand") and part.leader != NO_LEADER:
            isr = set(part.isr)
            if name == "shrink" and arg in isr and arg != part.leader:
                isr.discard(arg)
            elif (
                name == "expand"
                and arg in part.replicas
                and not fenced
                and self.holds[arg] >= self.holds[part.leader]
            ):
                isr.add(arg)
            else:
                return
            leader_epoch = state.brokers[part.leader].broker_epoch
            h.commit(
                alter_partition(
                    state,
                    h.settings,
                    broker_id=part.leader,
                    broker_epoch=leader_epoch,
                    items=[
                        AlterPartitionItem(
                            topic="t",
                            partition=0,
                            leader_epoch=part.leader_epoch,
                            partition_epoch=part.partition_epoch,
                            new_isr=tuple(sorted(isr)),
                            member_epochs={b: state.brokers[b].broker_epoch for b in isr},
                        )
                    ],
                )
            )
        elif name == "preferred":
            h.commit(
                elect_leaders(
                    state, h.settings, election_type=ElectionType.PREFERRED, partitions=[KEY]
                )
            )
        elif name == "unclean":
            h.commit(
                elect_leaders(
                    state, h.settings, election_type=ElectionType.UNCLEAN, partitions=[KEY]
                )
            )


def run(
    operations: list[tuple[str, int]], settings_: Settings, min_isr: int, seed: int
) -> list[str]:
    """Apply the operations; return every clean election of a leader missing a committed
    record (an empty list: the property holds)."""
    model = Model(settings_, min_isr, seed)
    violations: list[str] = []
    for step, (name, arg) in enumerate(operations):
        elections_before = len(model.harness.elections)
        model.apply(name, arg)
        for event in model.harness.elections[elections_before:]:
            if event.kind is ElectionKind.UNCLEAN:
                # The new leader's log is the truth now; the others truncate to it.
                model.committed = model.holds[event.leader]
                model.holds = {b: min(h, model.committed) for b, h in model.holds.items()}
            elif model.holds[event.leader] < model.committed:
                violations.append(
                    f"step {step} {name} {arg}: {event.kind.value} election of broker "
                    f"{event.leader} holding {model.holds[event.leader]} of "
                    f"{model.committed} committed records"
                )
    return violations


ELR = Settings(unclean_recovery_strategy=UncleanRecoveryStrategy.FIRST_ALIVE)
NO_ELR = Settings(
    eligible_leader_replicas=False, unclean_recovery_strategy=UncleanRecoveryStrategy.FIRST_ALIVE
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    operations=st.lists(operation, max_size=40),
    min_isr=st.sampled_from([1, 2, 3]),
    seed=st.integers(0, 2**16),
)
def test_no_clean_election_of_a_leader_that_misses_a_committed_record(
    operations: list[tuple[str, int]], min_isr: int, seed: int
) -> None:
    assert run(operations, ELR, min_isr, seed) == []


def test_the_property_fails_without_eligible_leader_replicas() -> None:
    """Negative control (R22's schedule): ISR {A, B}, A crashes (B leads alone), B loses
    its unflushed tail in a power loss and restarts; without ELR it is the last replica
    standing and leads with less than was committed."""
    model = Model(NO_ELR, 2, seed=0)
    leader = model.part.leader
    a, b = leader, next(r for r in model.part.replicas if r != leader)
    c = next(r for r in model.part.replicas if r not in (a, b))
    operations = [
        ("shrink", c),
        ("write", 5),
        ("fence", a),
        ("restart-unclean", b),
    ]
    assert run(operations, NO_ELR, 2, seed=0) != []
    assert run(operations, ELR, 2, seed=0) == []


@pytest.mark.parametrize("min_isr", [1, 2])
def test_an_eligible_replica_takes_over_when_the_last_isr_member_is_gone(min_isr: int) -> None:
    model = Model(ELR, min_isr, seed=0)
    a = model.part.leader
    b, c = (r for r in model.part.replicas if r != a)
    for name, arg in [("write", 3), ("fence", c), ("write", 2), ("fence", b), ("fence", a)]:
        model.apply(name, arg)
    assert model.part.leader == NO_LEADER
    model.apply("unfence", b)
    elected = model.part.leader
    if min_isr == 2:  # b left an ISR below the minimum: it is eligible and holds everything
        assert elected == b
        assert model.holds[b] == model.committed
    else:  # min ISR 1: b left a healthy ISR and may lack the last write; only a may lead
        assert elected == NO_LEADER
