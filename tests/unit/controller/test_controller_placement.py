"""Replica placement: Kafka's documented examples, rack alternation, refusals, properties."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.placement import (
    assign_rack_aware,
    assign_rack_unaware,
    assign_replicas,
    rack_alternated,
)
from minikafka.errors import ErrorCode, MiniKafkaError


def test_rack_unaware_matches_kafka_doc_example() -> None:
    # AdminUtils.assignReplicasToBrokers doc: 5 brokers, 10 partitions, RF 3, start 0, shift 0.
    assignment = assign_rack_unaware(
        brokers=[0, 1, 2, 3, 4],
        num_partitions=10,
        replication_factor=3,
        start_index=0,
        replica_shift=0,
    )
    assert assignment[:5] == [(0, 1, 2), (1, 2, 3), (2, 3, 4), (3, 4, 0), (4, 0, 1)]
    # After n partitions the shift grows: the second replica moves one further.
    assert assignment[5:] == [(0, 2, 3), (1, 3, 4), (2, 4, 0), (3, 0, 1), (4, 1, 2)]


def test_rack_alternated_matches_kafka_doc_example() -> None:
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    assert rack_alternated(racks) == [0, 3, 1, 5, 4, 2]


def test_rack_aware_matches_kafka_doc_example() -> None:
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    assignment = assign_rack_aware(
        broker_racks=racks, num_partitions=6, replication_factor=3, start_index=0, replica_shift=0
    )
    assert assignment == [
        (0, 3, 1),
        (3, 1, 5),
        (1, 5, 4),
        (5, 4, 2),
        (4, 2, 0),
        (2, 0, 3),
    ]


@pytest.mark.parametrize(
    ("brokers", "partitions", "rf", "code", "message"),
    [
        pytest.param(
            {1: "", 2: ""},
            1,
            3,
            ErrorCode.INVALID_REPLICATION_FACTOR,
            "replication factor 3 is larger than the 2 available brokers",
            id="rf-above-brokers",
        ),
        pytest.param(
            {},
            1,
            1,
            ErrorCode.INVALID_REPLICATION_FACTOR,
            "larger than the 0 available brokers",
            id="no-brokers",
        ),
        pytest.param(
            {1: ""}, 1, 0, ErrorCode.INVALID_REPLICATION_FACTOR, "at least 1", id="rf-zero"
        ),
        pytest.param({1: ""}, 0, 1, ErrorCode.INVALID_PARTITIONS, "at least 1", id="no-partitions"),
    ],
)
def test_impossible_requests_refused(
    brokers: dict[int, str], partitions: int, rf: int, code: ErrorCode, message: str
) -> None:
    with pytest.raises(MiniKafkaError) as raised:
        assign_replicas(
            topic="t", broker_racks=brokers, num_partitions=partitions, replication_factor=rf
        )
    assert raised.value.code is code
    assert message in raised.value.message


def test_deterministic_per_topic() -> None:
    brokers = {1: "", 2: "", 3: ""}
    first = assign_replicas(
        topic="orders", broker_racks=brokers, num_partitions=6, replication_factor=2
    )
    again = assign_replicas(
        topic="orders", broker_racks=brokers, num_partitions=6, replication_factor=2
    )
    assert first == again


@given(
    broker_count=st.integers(1, 7),
    rack_count=st.integers(0, 4),
    partitions=st.integers(1, 30),
    data=st.data(),
    topic=st.text(alphabet="abcdefgh-._", min_size=1, max_size=12),
)
def test_placement_properties(
    broker_count: int, rack_count: int, partitions: int, data: st.DataObject, topic: str
) -> None:
    rf = data.draw(st.integers(1, broker_count))
    brokers = {
        broker_id: (f"r{broker_id % rack_count}" if rack_count else "")
        for broker_id in range(10, 10 + broker_count)
    }
    assignment = assign_replicas(
        topic=topic, broker_racks=brokers, num_partitions=partitions, replication_factor=rf
    )
    assert len(assignment) == partitions
    racks_available = len(set(brokers.values()))
    for replicas in assignment:
        assert len(replicas) == rf
        assert len(set(replicas)) == rf
        assert set(replicas) <= set(brokers)
        if rack_count:
            # Replicas spread over as many racks as possible.
            assert len({brokers[b] for b in replicas}) == min(rf, racks_available)
    # Leaders (first replicas) are spread evenly.
    leaders = Counter(replicas[0] for replicas in assignment)
    if partitions % broker_count == 0:
        assert set(leaders.values()) == {partitions // broker_count}
