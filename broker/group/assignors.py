"""PURE server-side assignors (KIP-848 `group.consumer.assignors`): `range` and `uniform`.

An assignor maps (members with their subscriptions, partition counts, previous target) to a
target: member id -> partitions. Every assignor here keeps three rules, checked by the
tests for any input:

- each partition of a topic somebody subscribes to (and that exists) goes to exactly one
  member, and only to a member subscribed to its topic;
- a member subscribed to nothing that exists gets nothing (but is in the result);
- the result depends only on the inputs (no randomness, no dict-order accidents).

`range` (the default, Kafka's RangeAssignor): per topic, the subscribed members in order of
their static instance id, else member id, each take one contiguous run of partitions; the
first `count % members` take one more. Members with the same subscription therefore get the
same partition numbers of every topic (co-partitioned joins), and a key's partition always
goes to the same member for a given membership.

`uniform` (Kafka's UniformAssignor, simplified): balanced and sticky. Previous owners keep
what they still may (up to the even share), the rest goes to the least-loaded subscribed
member, then single partitions move from the most to the least loaded member that may take
them until no such move narrows the spread. With identical subscriptions every member ends
with floor or ceil of partitions / members.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import msgspec

from broker.group.model import TopicPartition


class MemberSubscription(msgspec.Struct, frozen=True, kw_only=True):
    topics: frozenset[str]
    instance_id: str | None = None


Target = dict[str, frozenset[TopicPartition]]
Assignor = Callable[
    [Mapping[str, MemberSubscription], Mapping[str, int], Mapping[str, frozenset[TopicPartition]]],
    Target,
]


def _order(members: Mapping[str, MemberSubscription]) -> list[str]:
    """Members in a stable order: static members by instance id first, then the rest by id."""
    return sorted(
        members,
        key=lambda m: (members[m].instance_id is None, members[m].instance_id or "", m),
    )


def range_assign(
    members: Mapping[str, MemberSubscription],
    partition_counts: Mapping[str, int],
    previous: Mapping[str, frozenset[TopicPartition]],
) -> Target:
    """Contiguous runs per topic; `previous` is not used (range is a pure function of the
    membership, which is what makes it predictable)."""
    del previous
    ordered = _order(members)
    result: dict[str, set[TopicPartition]] = {m: set() for m in ordered}
    topics = sorted({t for s in members.values() for t in s.topics if t in partition_counts})
    for topic in topics:
        subscribers = [m for m in ordered if topic in members[m].topics]
        count = partition_counts[topic]
        share, extra = divmod(count, len(subscribers))
        start = 0
        for index, member in enumerate(subscribers):
            length = share + (1 if index < extra else 0)
            result[member].update(TopicPartition(topic, p) for p in range(start, start + length))
            start += length
    return {m: frozenset(parts) for m, parts in result.items()}


def uniform_assign(
    members: Mapping[str, MemberSubscription],
    partition_counts: Mapping[str, int],
    previous: Mapping[str, frozenset[TopicPartition]],
) -> Target:
    """Balanced and sticky (see the module docstring)."""
    ordered = _order(members)
    result: dict[str, set[TopicPartition]] = {m: set() for m in ordered}
    if not ordered:
        return {}
    wanted = sorted(
        {
            TopicPartition(t, p)
            for s in members.values()
            for t in s.topics
            if t in partition_counts
            for p in range(partition_counts[t])
        }
    )
    share = -(-len(wanted) // len(ordered))  # ceil: nobody keeps more than an even share

    def may_own(member: str, tp: TopicPartition) -> bool:
        return tp.topic in members[member].topics and tp.partition < partition_counts.get(
            tp.topic, 0
        )

    taken: set[TopicPartition] = set()
    for member in ordered:
        kept = sorted(tp for tp in previous.get(member, frozenset()) if may_own(member, tp))
        for tp in kept[:share]:
            if tp not in taken:
                result[member].add(tp)
                taken.add(tp)
    for tp in wanted:
        if tp in taken:
            continue
        eligible = [m for m in ordered if may_own(m, tp)]
        owner = min(eligible, key=lambda m: (len(result[m]), ordered.index(m)))
        result[owner].add(tp)
        taken.add(tp)
    # Narrow the spread: each move shrinks the largest set, so at most len(wanted) moves.
    for _ in range(len(wanted)):
        move = _best_move(ordered, result, may_own)
        if move is None:
            break
        source, target, tp = move
        result[source].remove(tp)
        result[target].add(tp)
    return {m: frozenset(parts) for m, parts in result.items()}


def _best_move(
    ordered: list[str],
    result: Mapping[str, set[TopicPartition]],
    may_own: Callable[[str, TopicPartition], bool],
) -> tuple[str, str, TopicPartition] | None:
    """One partition from a member holding at least two more than a member that may own
    it: from the most loaded, to the least loaded, the highest partition first."""
    by_load = sorted(ordered, key=lambda m: (-len(result[m]), ordered.index(m)))
    for source in by_load:
        for target in reversed(by_load):
            if len(result[source]) - len(result[target]) < 2:
                break
            movable = sorted(tp for tp in result[source] if may_own(target, tp))
            if movable:
                return source, target, movable[-1]
    return None


ASSIGNORS: Mapping[str, Assignor] = {"range": range_assign, "uniform": uniform_assign}
