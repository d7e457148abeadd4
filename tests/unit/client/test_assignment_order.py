"""The assignment's order does not follow a set's: partitions are added in (topic,
partition) order, so the fetcher (which plans its requests in assignment order) behaves
the same under every `PYTHONHASHSEED` (the replication simulator replays a seed in
another process; with two partitions of `t` it did not before). A set's order depends
on the hash seed, so without the fix these fail only under some seeds: the regression
that always failed is `test_a_client_consumer_seed_replays_across_processes`."""

from __future__ import annotations

import pytest

from client.offset_rules import EARLIEST
from client.records import TopicPartition
from client.subscription import SubscriptionState

CASES = [
    pytest.param(
        [TopicPartition("t", 1), TopicPartition("t", 0)],
        [TopicPartition("t", 0), TopicPartition("t", 1)],
        id="partitions-of-one-topic",
    ),
    pytest.param(
        [TopicPartition("u", 0), TopicPartition("t", 2), TopicPartition("t", 10)],
        [TopicPartition("t", 2), TopicPartition("t", 10), TopicPartition("u", 0)],
        id="topics-then-partitions-numerically",
    ),
]


@pytest.mark.parametrize(("given", "order"), CASES)
def test_assigned_partitions_are_kept_in_topic_partition_order(
    given: list[TopicPartition], order: list[TopicPartition]
) -> None:
    state = SubscriptionState((), EARLIEST)
    state.assign_partitions(given)
    assert list(state.assignment) == order


def test_a_partition_added_later_comes_after_the_kept_ones() -> None:
    state = SubscriptionState((), EARLIEST)
    state.assign_partitions([TopicPartition("t", 1)])
    kept = state.assignment[TopicPartition("t", 1)]
    state.assign_partitions([TopicPartition("t", 0), TopicPartition("t", 1)])
    assert list(state.assignment) == [TopicPartition("t", 1), TopicPartition("t", 0)]
    assert state.assignment[TopicPartition("t", 1)] is kept  # its state (position) kept
