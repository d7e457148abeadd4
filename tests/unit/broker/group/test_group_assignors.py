"""Server-side assignors: named rows for `range` and `uniform`, and the rules every assignor
keeps for any membership (each existing subscribed partition to exactly one subscribed
member; uniform balanced with identical subscriptions and sticky)."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.group.assignors import ASSIGNORS, MemberSubscription, range_assign, uniform_assign
from broker.group.model import TopicPartition

Target = dict[str, frozenset[TopicPartition]]


def subs(**members: str) -> dict[str, MemberSubscription]:
    """`subs(a="t,u")`: member a subscribes to topics t and u."""
    return {
        m: MemberSubscription(topics=frozenset(t for t in topics.split(",") if t))
        for m, topics in members.items()
    }


def parts(text: str) -> frozenset[TopicPartition]:
    """`parts("t0 t1 u3")`: partitions 0 and 1 of t, 3 of u."""
    return frozenset(TopicPartition(item[0], int(item[1:])) for item in text.split())


RANGE_CASES = [
    ("one member takes all", subs(a="t"), {"t": 3}, {"a": "t0 t1 t2"}),
    ("even split", subs(a="t", b="t"), {"t": 4}, {"a": "t0 t1", "b": "t2 t3"}),
    ("first members take the remainder", subs(a="t", b="t"), {"t": 3}, {"a": "t0 t1", "b": "t2"}),
    (
        "more members than partitions",
        subs(a="t", b="t", c="t"),
        {"t": 2},
        {"a": "t0", "b": "t1", "c": ""},
    ),
    (
        "same numbers of every topic (co-partitioned)",
        subs(a="t,u", b="t,u"),
        {"t": 2, "u": 2},
        {"a": "t0 u0", "b": "t1 u1"},
    ),
    (
        "each topic among its own subscribers",
        subs(a="t", b="t,u", c="u"),
        {"t": 2, "u": 2},
        {"a": "t0", "b": "t1 u0", "c": "u1"},
    ),
    ("topic that does not exist is ignored", subs(a="t,x"), {"t": 1}, {"a": "t0"}),
    (
        "member subscribed to nothing gets nothing",
        subs(a="t", b=""),
        {"t": 2},
        {"a": "t0 t1", "b": ""},
    ),
    ("no members", {}, {"t": 2}, {}),
]


@pytest.mark.parametrize(
    ("members", "counts", "expected"),
    [pytest.param(*row[1:], id=row[0]) for row in RANGE_CASES],
)
def test_range_table(
    members: dict[str, MemberSubscription], counts: dict[str, int], expected: dict[str, str]
) -> None:
    assert range_assign(members, counts, {}) == {m: parts(p) for m, p in expected.items()}


def test_range_orders_static_members_by_instance_id() -> None:
    members = {
        "zz": MemberSubscription(topics=frozenset({"t"}), instance_id="host-1"),
        "aa": MemberSubscription(topics=frozenset({"t"}), instance_id="host-2"),
    }
    assert range_assign(members, {"t": 2}, {}) == {"zz": parts("t0"), "aa": parts("t1")}


UNIFORM_CASES = [
    (
        "round robin from nothing",
        subs(a="t", b="t", c="t"),
        {"t": 6},
        {},
        {"a": "t0 t3", "b": "t1 t4", "c": "t2 t5"},
    ),
    (
        "joiner takes from the most loaded, others keep theirs",
        subs(a="t", b="t", c="t"),
        {"t": 6},
        {"a": "t0 t1 t2", "b": "t3 t4 t5"},
        {"a": "t0 t1", "b": "t3 t4", "c": "t2 t5"},
    ),
    (
        "leaver's partitions spread, others keep theirs",
        subs(a="t", b="t"),
        {"t": 6},
        {"a": "t0 t1", "b": "t2 t3", "c": "t4 t5"},
        {"a": "t0 t1 t4", "b": "t2 t3 t5"},
    ),
    (
        "previous owner no longer subscribed loses it",
        subs(a="u", b="t"),
        {"t": 2, "u": 1},
        {"a": "t0 t1"},
        {"a": "u0", "b": "t0 t1"},
    ),
    (
        "partitions past a shrunk topic are dropped",
        subs(a="t"),
        {"t": 1},
        {"a": "t0 t1"},
        {"a": "t0"},
    ),
    (
        "different subscriptions stay within what each may own",
        subs(a="t", b="t,u"),
        {"t": 2, "u": 2},
        {},
        {"a": "t0 t1", "b": "u0 u1"},
    ),
]


@pytest.mark.parametrize(
    ("members", "counts", "previous", "expected"),
    [pytest.param(*row[1:], id=row[0]) for row in UNIFORM_CASES],
)
def test_uniform_table(
    members: dict[str, MemberSubscription],
    counts: dict[str, int],
    previous: dict[str, str],
    expected: dict[str, str],
) -> None:
    prev = {m: parts(p) for m, p in previous.items()}
    assert uniform_assign(members, counts, prev) == {m: parts(p) for m, p in expected.items()}


# ---- properties --------------------------------------------------------------------------

TOPICS = ("t", "u", "v")
memberships = st.dictionaries(
    st.sampled_from(["m1", "m2", "m3", "m4", "m5", "m6"]),
    st.frozensets(st.sampled_from(TOPICS)).map(lambda t: MemberSubscription(topics=t)),
    max_size=6,
)
counts_strategy = st.fixed_dictionaries({t: st.integers(0, 7) for t in TOPICS})


def previous_targets(members: Mapping[str, MemberSubscription]) -> st.SearchStrategy[Target]:
    tp = st.builds(TopicPartition, st.sampled_from((*TOPICS, "gone")), st.integers(0, 8))
    return st.fixed_dictionaries({m: st.frozensets(tp, max_size=6) for m in members})


def check_rules(
    members: Mapping[str, MemberSubscription], counts: Mapping[str, int], result: Target
) -> None:
    assert set(result) == set(members)
    owners: dict[TopicPartition, str] = {}
    for member, assigned in result.items():
        for tp in assigned:
            assert tp not in owners, f"{tp} given to {owners[tp]} and {member}"
            owners[tp] = member
            assert tp.topic in members[member].topics
    wanted = {
        TopicPartition(t, p)
        for s in members.values()
        for t in s.topics
        for p in range(counts.get(t, 0))
    }
    assert set(owners) == wanted


@settings(max_examples=300, deadline=None)
@given(
    data=st.data(),
    members=memberships,
    counts=counts_strategy,
    name=st.sampled_from(sorted(ASSIGNORS)),
)
def test_every_partition_once_to_a_subscriber(
    data: st.DataObject, members: dict[str, MemberSubscription], counts: dict[str, int], name: str
) -> None:
    previous = data.draw(previous_targets(members))
    result = ASSIGNORS[name](members, counts, previous)
    check_rules(members, counts, result)
    assert ASSIGNORS[name](members, counts, previous) == result


@settings(max_examples=200, deadline=None)
@given(
    data=st.data(),
    names=st.frozensets(st.sampled_from(["m1", "m2", "m3", "m4", "m5"]), min_size=1),
    topics=st.frozensets(st.sampled_from(TOPICS), min_size=1),
    counts=counts_strategy,
)
def test_uniform_balanced_and_sticky_with_identical_subscriptions(
    data: st.DataObject, names: frozenset[str], topics: frozenset[str], counts: dict[str, int]
) -> None:
    members = {m: MemberSubscription(topics=topics) for m in names}
    previous = data.draw(previous_targets(members))
    result = uniform_assign(members, counts, previous)
    check_rules(members, counts, result)
    sizes = [len(p) for p in result.values()]
    assert max(sizes) - min(sizes) <= 1
    # Sticky: from a balanced start, a second run with the same membership moves nothing.
    assert uniform_assign(members, counts, result) == result
