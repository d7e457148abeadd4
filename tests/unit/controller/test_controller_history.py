"""Partition history (`controller.history`): the events each record adds, and the bounds."""

from __future__ import annotations

import msgspec
import pytest

from controller import history
from controller.history import HistoryEvent, PartitionHistory, events_of
from controller.model import NO_LEADER, BrokerRegistration, ClusterState, PartitionRegistration
from controller.records import (
    BrokerRecord,
    ControllerEpochRecord,
    PartitionRecord,
    Record,
    RemoveTopicRecord,
)
from controller.state_machine import NewTopic, create_topics, replay
from tests.unit.controller.controller_harness import Harness

KEY = ("t", 0)
BASE = PartitionRegistration(replicas=(1, 2, 3), leader=1, isr=(1, 2, 3))


def part(**changes: object) -> PartitionRegistration:
    return msgspec.structs.replace(BASE, **changes)


def state_with(registration: PartitionRegistration | None) -> ClusterState:
    harness = Harness()
    harness.start_brokers(1, 2, 3)
    harness.create("t", rf=3)
    state = harness.state
    if registration is None:
        return msgspec.structs.replace(state, partitions={})
    return msgspec.structs.replace(state, partitions={KEY: registration})


@pytest.mark.parametrize(
    ("before", "after", "kinds", "detail"),
    [
        pytest.param(None, BASE, ("created",), "replicas [1, 2, 3]", id="created"),
        pytest.param(
            BASE,
            part(leader=2, leader_epoch=1, isr=(2, 3), partition_epoch=1),
            ("leader", "isr-shrink"),
            "leader 1 -> 2 at epoch 1; isr [1, 2, 3] -> [2, 3]",
            id="leader-killed",
        ),
        pytest.param(
            BASE,
            part(isr=(1, 2), partition_epoch=1),
            ("isr-shrink",),
            "isr [1, 2, 3] -> [1, 2]",
            id="isr-shrink",
        ),
        pytest.param(
            part(isr=(1,), partition_epoch=1),
            part(isr=(1, 3), partition_epoch=2),
            ("isr-expand",),
            "isr [1] -> [1, 3]",
            id="isr-expand",
        ),
        pytest.param(
            part(isr=(1,)),
            part(leader=NO_LEADER, isr=(1,), partition_epoch=1),
            ("offline",),
            "leader 1 -> none (offline)",
            id="offline",
        ),
        pytest.param(
            part(leader=NO_LEADER, isr=(1,)),
            part(leader=3, leader_epoch=1, isr=(3,), recovering=True, partition_epoch=1),
            ("leader", "unclean-election", "isr-shrink", "isr-expand"),
            "leader none -> 3 at epoch 1; UNCLEAN: 3 was not in ISR [1]; isr [1] -> [3]",
            id="unclean",
        ),
        pytest.param(
            part(leader=3, isr=(3,), recovering=True),
            part(leader=3, isr=(3, 2), recovering=False, partition_epoch=1),
            ("recovered", "isr-expand"),
            "isr [3] -> [3, 2]",
            id="recovered",
        ),
        pytest.param(
            BASE,
            part(leader_epoch=1, partition_epoch=1),
            ("leader",),
            "leader 1 -> 1 at epoch 1",
            id="same-leader-new-epoch",
        ),
        pytest.param(BASE, part(partition_epoch=1), ("changed",), "", id="only-epoch"),
    ],
)
def test_partition_record_events(
    before: PartitionRegistration | None,
    after: PartitionRegistration,
    kinds: tuple[str, ...],
    detail: str,
) -> None:
    state = state_with(before)
    record = PartitionRecord(topic="t", partition=0, registration=after)
    (event,) = events_of(state, 42, record, time_ms=1_000)
    assert event.kinds == kinds
    assert event.detail == detail
    assert (event.metadata_offset, event.time_ms, event.topic, event.partition) == (
        42,
        1_000,
        "t",
        0,
    )
    assert (event.leader, event.leader_epoch, event.isr) == (
        after.leader,
        after.leader_epoch,
        after.isr,
    )
    assert event.previous_leader == (before.leader if before is not None else NO_LEADER)
    assert event.state == after.status.value
    assert (event.elr, event.last_known_elr) == (after.elr, after.last_known_elr)


def broker(**changes: object) -> BrokerRegistration:
    base = BrokerRegistration(
        broker_id=2, host="h", port=1, incarnation_id="i", broker_epoch=5, fenced=False
    )
    return msgspec.structs.replace(base, **changes)


@pytest.mark.parametrize(
    ("before", "after", "kinds"),
    [
        pytest.param(None, broker(fenced=True), ("broker-registered",), id="first-registration"),
        pytest.param(
            broker(), broker(broker_epoch=9, fenced=True), ("broker-registered",), id="re-register"
        ),
        pytest.param(broker(), broker(fenced=True), ("broker-fenced",), id="fenced"),
        pytest.param(broker(fenced=True), broker(), ("broker-unfenced",), id="unfenced"),
        pytest.param(
            broker(),
            broker(in_controlled_shutdown=True),
            ("broker-controlled-shutdown",),
            id="controlled-shutdown",
        ),
        pytest.param(broker(), broker(host="other"), (), id="nothing-to-say"),
    ],
)
def test_broker_record_events(
    before: BrokerRegistration | None, after: BrokerRegistration, kinds: tuple[str, ...]
) -> None:
    state = ClusterState(brokers={2: before} if before is not None else {})
    events = events_of(state, 7, BrokerRecord(registration=after), time_ms=5)
    assert tuple(kind for event in events for kind in event.kinds) == kinds
    for event in events:
        assert (event.broker_id, event.broker_epoch) == (2, after.broker_epoch)
        assert not event.is_partition_event


def test_controller_epoch_event() -> None:
    (event,) = events_of(
        ClusterState(), 3, ControllerEpochRecord(controller_id=1, controller_epoch=4), time_ms=0
    )
    assert event.kinds == ("controller",)
    assert event.detail == "controller 1 active at controller epoch 4"


class Clock:
    def __init__(self) -> None:
        self.now_ms = 1_000

    def __call__(self) -> int:
        self.now_ms += 1
        return self.now_ms


def replay_all(store: PartitionHistory, state: ClusterState, records: list[Record]) -> ClusterState:
    offset = state.metadata_offset
    for record in records:
        offset += 1
        store.observe(state, offset, record)
        state = replay(state, offset, record)
    return state


def test_store_merges_the_replicas_broker_events_in_offset_order() -> None:
    harness = Harness()
    store = PartitionHistory(wall_ms=Clock())
    harness.start_brokers(1, 2, 3, 4)
    state = harness.state
    result = create_topics(
        state,
        harness.settings,
        topics=[NewTopic(name="t", num_partitions=1, replication_factor=2)],
        validate_only=False,
    )
    state = replay_all(store, state, list(result.records))
    replicas = state.partitions[KEY].replicas
    other = next(b for b in (1, 2, 3, 4) if b not in replicas)
    fence = [
        BrokerRecord(registration=msgspec.structs.replace(state.brokers[b], fenced=True))
        for b in (replicas[1], other)
    ]
    shrink = PartitionRecord(
        topic="t",
        partition=0,
        registration=msgspec.structs.replace(
            state.partitions[KEY], isr=(replicas[0],), partition_epoch=1
        ),
    )
    state = replay_all(store, state, [*fence, shrink])
    events, truncated = store.events("t", 0)
    assert not truncated
    assert [event.kinds for event in events] == [
        ("created",),
        ("broker-fenced",),
        ("isr-shrink",),
    ]
    assert events[1].broker_id == replicas[1]  # the other broker's event is not shown
    offsets = [event.metadata_offset for event in events]
    assert offsets == sorted(offsets)
    assert store.events("t", 1) == ([], False)


def test_store_bounds_per_partition_and_in_total() -> None:
    store = PartitionHistory(wall_ms=Clock(), events_per_partition_max=3, events_max=5)
    state = state_with(None)
    records: list[Record] = [
        PartitionRecord(topic="t", partition=p, registration=part(partition_epoch=epoch))
        for epoch in range(4)
        for p in (0, 1)
    ]
    replay_all(store, state, records)
    zero, zero_truncated = store.events("t", 0)
    one, one_truncated = store.events("t", 1)
    # 8 events: each partition keeps its newest 3, the store its newest 5 in all.
    assert [event.partition_epoch for event in zero] == [2, 3]
    assert [event.partition_epoch for event in one] == [1, 2, 3]
    assert zero_truncated
    assert one_truncated


def test_a_deleted_topic_takes_its_history_along() -> None:
    store = PartitionHistory(wall_ms=Clock())
    state = state_with(None)
    state = replay_all(store, state, [PartitionRecord(topic="t", partition=0, registration=BASE)])
    assert store.events("t", 0)[0]
    replay_all(store, state, [RemoveTopicRecord(name="t")])
    assert store.events("t", 0) == ([], False)


def test_seed_starts_from_a_loaded_state_marked_replayed_and_truncated() -> None:
    store = PartitionHistory(wall_ms=Clock())
    state = state_with(BASE)
    store.seed(state)
    events, truncated = store.events("t", 0)
    assert truncated
    assert [(e.kinds, e.replayed, e.leader) for e in events] == [((history.SNAPSHOT,), True, 1)]
    assert isinstance(events[0], HistoryEvent)
