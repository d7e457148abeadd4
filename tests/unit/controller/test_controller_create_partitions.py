"""CreatePartitions (`state_machine.create_partitions`): placement like creation, refusals."""

from __future__ import annotations

import pytest

from controller.placement import assign_replicas
from controller.propagation import plan_propagation
from controller.state_machine import NewPartitions, Settings, create_partitions, fence_broker
from minikafka.errors import ErrorCode
from minikafka.limits import TopicLimits
from tests.unit.controller.controller_harness import Harness


def cluster(settings: Settings | None = None, *, brokers: int = 3) -> Harness:
    """`brokers` unfenced brokers, topic t with 2 partitions at RF 3 (or fewer brokers)."""
    harness = Harness(settings)
    harness.start_brokers(*range(1, brokers + 1))
    harness.create("t", partitions=2, rf=min(3, brokers), configs={"min.insync.replicas": "2"})
    return harness


def test_new_partitions_are_placed_as_creation_places_them() -> None:
    harness = cluster()
    before = harness.state
    (result,) = harness.commit(
        create_partitions(
            harness.state,
            harness.settings,
            topics=[NewPartitions(name="t", count=5)],
            validate_only=False,
        )
    )
    assert result.error is ErrorCode.NONE
    assert harness.state.topics["t"].num_partitions == 5
    assert harness.state.topics["t"].configs == {"min.insync.replicas": "2"}
    expected = assign_replicas(
        topic="t", broker_racks={1: "", 2: "", 3: ""}, num_partitions=5, replication_factor=3
    )
    for index in range(5):
        part = harness.part(("t", index))
        assert part.replicas == expected[index]
        assert part.leader == part.replicas[0]
        assert part.isr == part.replicas
        assert (part.leader_epoch, part.partition_epoch) == (0, 0)
    # The existing partitions are untouched.
    for index in range(2):
        assert harness.part(("t", index)) == before.partitions[("t", index)]


def test_the_replicas_of_new_partitions_hear_about_them() -> None:
    harness = cluster()
    before = harness.state
    result = create_partitions(
        harness.state,
        harness.settings,
        topics=[NewPartitions(name="t", count=3)],
        validate_only=False,
    )
    harness.commit(result)
    plan = plan_propagation(before, harness.state, result.records)
    assert plan.new_partitions == frozenset({("t", 2)})
    for replica in harness.part(("t", 2)).replicas:
        assert ("t", 2) in plan.leader_and_isr[replica]
    assert plan.update_metadata


@pytest.mark.parametrize(
    ("request_topics", "code", "message"),
    [
        pytest.param(
            [NewPartitions(name="nope", count=3)],
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            "topic 'nope' does not exist",
            id="unknown-topic",
        ),
        pytest.param(
            [NewPartitions(name="t", count=2)],
            ErrorCode.INVALID_PARTITIONS,
            "topic 't' already has 2 partitions",
            id="same-count",
        ),
        pytest.param(
            [NewPartitions(name="t", count=1)],
            ErrorCode.INVALID_PARTITIONS,
            "partitions can be added, never removed",
            id="fewer",
        ),
        pytest.param(
            [NewPartitions(name="t", count=11)],
            ErrorCode.INVALID_PARTITIONS,
            "max.partitions.per.topic=10",
            id="per-topic-limit",
        ),
        pytest.param(
            [NewPartitions(name="t", count=3), NewPartitions(name="t", count=4)],
            ErrorCode.INVALID_REQUEST,
            "appears more than once",
            id="twice-in-request",
        ),
    ],
)
def test_refusals(request_topics: list[NewPartitions], code: ErrorCode, message: str) -> None:
    harness = cluster(Settings(limits=TopicLimits(max_partitions_per_topic=10)))
    result = create_partitions(
        harness.state, harness.settings, topics=request_topics, validate_only=False
    )
    assert result.records == ()
    for reply in result.reply:
        assert reply.error is code
        assert message in reply.message


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        pytest.param(
            TopicLimits(max_partitions_per_cluster=4),
            "above the limit max.partitions.per.cluster=4 (2 exist)",
            id="cluster",
        ),
        pytest.param(
            TopicLimits(max_partitions_per_broker=3),
            "above the limit max.partitions.per.broker=3",
            id="broker",
        ),
    ],
)
def test_capacity_limits(limits: TopicLimits, message: str) -> None:
    harness = cluster(Settings(limits=limits))
    result = create_partitions(
        harness.state,
        harness.settings,
        topics=[NewPartitions(name="t", count=5)],
        validate_only=False,
    )
    (reply,) = result.reply
    assert reply.error is ErrorCode.POLICY_VIOLATION
    assert message in reply.message
    assert result.records == ()


def test_too_few_brokers_for_the_topics_replication_factor() -> None:
    harness = cluster()
    harness.commit(fence_broker(harness.state, harness.settings, broker_id=3, reason="test"))
    (reply,) = create_partitions(
        harness.state,
        harness.settings,
        topics=[NewPartitions(name="t", count=3)],
        validate_only=False,
    ).reply
    assert reply.error is ErrorCode.INVALID_REPLICATION_FACTOR
    assert "replication factor 3 is larger than the 2 available brokers" in reply.message


def test_validate_only_writes_nothing_and_one_bad_topic_spoils_no_other() -> None:
    harness = cluster()
    harness.create("u", partitions=1, rf=1)
    result = create_partitions(
        harness.state,
        harness.settings,
        topics=[NewPartitions(name="t", count=4), NewPartitions(name="u", count=1)],
        validate_only=True,
    )
    assert [r.error for r in result.reply] == [ErrorCode.NONE, ErrorCode.INVALID_PARTITIONS]
    assert result.records == ()
    result = create_partitions(
        harness.state,
        harness.settings,
        topics=[NewPartitions(name="t", count=4), NewPartitions(name="u", count=1)],
        validate_only=False,
    )
    harness.commit(result)
    assert harness.state.topics["t"].num_partitions == 4
    assert harness.state.topics["u"].num_partitions == 1
