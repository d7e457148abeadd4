"""Committed offsets: Kafka's group placement, the record codec, replay (last record of a
key wins, tombstones delete)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.group.model import Group, TopicPartition
from broker.group.offsets import (
    OffsetRecord,
    commit_error,
    compaction_due,
    coordinator_lease_holds,
    coordinator_partition,
    decode_commit,
    encode_commit,
    encode_group,
    java_string_hash,
    replay,
    replay_groups,
    snapshot,
)
from minikafka.errors import ErrorCode

# Values of Java's String.hashCode(), as the JVM computes them.
HASHES = [
    ("empty", "", 0),
    ("one letter", "a", 97),
    ("three letters", "abc", 96354),
    ("overflows", "hello", 99162322),
    ("wraps to Integer.MIN_VALUE", "polygenelubricants", -(2**31)),
    # U+1F600 is the surrogate pair D83D DE00: 0xD83D * 31 + 0xDE00.
    ("outside the BMP: two UTF-16 units", "\U0001f600", 0xD83D * 31 + 0xDE00),
]


@pytest.mark.parametrize(("text", "expected"), [pytest.param(*r[1:], id=r[0]) for r in HASHES])
def test_java_string_hash(text: str, expected: int) -> None:
    assert java_string_hash(text) == expected


PLACEMENT = [
    ("Integer.MIN_VALUE masks to 0", "polygenelubricants", 50, 0),
    ("abc of 50", "abc", 50, 96354 % 50),
    ("hello of 3", "hello", 3, 99162322 % 3),
    ("one partition", "anything", 1, 0),
]


@pytest.mark.parametrize(
    ("group", "count", "expected"), [pytest.param(*r[1:], id=r[0]) for r in PLACEMENT]
)
def test_coordinator_partition(group: str, count: int, expected: int) -> None:
    assert coordinator_partition(group, count) == expected


def test_partition_count_must_be_positive() -> None:
    with pytest.raises(ValueError, match="partition_count must be positive, got 0"):
        coordinator_partition("g", 0)


T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)


def commit(group: str, tp: TopicPartition, offset: int | None) -> tuple[bytes, bytes | None]:
    record = None if offset is None else OffsetRecord(offset=offset, leader_epoch=3)
    return encode_commit(group, tp, record)


REPLAYS = [
    ("last record of a key wins", [commit("g", T0, 5), commit("g", T0, 9)], {"g": {T0: 9}}),
    ("a reset may move back", [commit("g", T0, 9), commit("g", T0, 2)], {"g": {T0: 2}}),
    (
        "keys are per group and partition",
        [commit("g", T0, 1), commit("g", T1, 2), commit("h", T0, 3)],
        {"g": {T0: 1, T1: 2}, "h": {T0: 3}},
    ),
    (
        "tombstone deletes",
        [commit("g", T0, 1), commit("g", T1, 2), commit("g", T0, None)],
        {"g": {T1: 2}},
    ),
    ("last tombstone drops the group", [commit("g", T0, 1), commit("g", T0, None)], {}),
    ("tombstone of nothing", [commit("g", T0, None)], {}),
    (
        "records that are not commits are skipped",
        [(None, b"x"), (b"\xc1", b"x"), commit("g", T0, 4)],
        {"g": {T0: 4}},
    ),
]


@pytest.mark.parametrize(("records", "expected"), [pytest.param(*r[1:], id=r[0]) for r in REPLAYS])
def test_replay(
    records: list[tuple[bytes, bytes | None]], expected: dict[str, dict[TopicPartition, int]]
) -> None:
    result = replay({}, records)
    assert {g: {tp: r.offset for tp, r in parts.items()} for g, parts in result.items()} == expected


def test_commit_round_trip_keeps_epoch_and_metadata() -> None:
    record = OffsetRecord(offset=42, leader_epoch=7, metadata="m", commit_timestamp_ms=1)
    key, value = encode_commit("g", T1, record)
    assert decode_commit(key, value) == ("g", T1, record)


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["g", "h"]), st.sampled_from([T0, T1]), st.none() | st.integers(0, 99)
        ),
        max_size=30,
    ),
    st.integers(0, 30),
)
def test_replay_in_two_parts_equals_replay_at_once(
    commits: list[tuple[str, TopicPartition, int | None]], split: int
) -> None:
    records = [commit(g, tp, offset) for g, tp, offset in commits]
    assert replay(replay({}, records[:split]), records[split:]) == replay({}, records)


E = ErrorCode
COMMIT_ERRORS = [
    (
        "no replicas enough: coordinator unavailable",
        E.NOT_ENOUGH_REPLICAS,
        E.COORDINATOR_NOT_AVAILABLE,
    ),
    ("below min ISR after append", E.NOT_ENOUGH_REPLICAS_AFTER_APPEND, E.COORDINATOR_NOT_AVAILABLE),
    ("partition gone", E.UNKNOWN_TOPIC_OR_PARTITION, E.COORDINATOR_NOT_AVAILABLE),
    ("leadership moved", E.NOT_LEADER_OR_FOLLOWER, E.NOT_COORDINATOR),
    ("leader epoch moved", E.FENCED_LEADER_EPOCH, E.NOT_COORDINATOR),
    ("disk failed", E.KAFKA_STORAGE_ERROR, E.NOT_COORDINATOR),
    ("timeout stays a timeout", E.REQUEST_TIMED_OUT, E.REQUEST_TIMED_OUT),
]


@pytest.mark.parametrize(
    ("append", "expected"), [pytest.param(*r[1:], id=r[0]) for r in COMMIT_ERRORS]
)
def test_commit_error(append: ErrorCode, expected: ErrorCode) -> None:
    assert commit_error(append) is expected


def test_membership_records_replay_last_wins_and_tombstones() -> None:
    first = Group(group_id="g", group_epoch=1, assignment_epoch=1)
    second = Group(group_id="g", group_epoch=2, assignment_epoch=2)
    other = Group(group_id="h", group_epoch=5, assignment_epoch=5)
    records = [
        encode_group("g", first),
        commit("g", T0, 3),  # an offset record: not membership, skipped here
        encode_group("h", other),
        encode_group("g", second),
    ]
    assert replay_groups({}, records) == {"g": second, "h": other}
    assert replay_groups({}, [*records, encode_group("g", None)]) == {"h": other}
    # ... and membership records are not offsets.
    assert replay({}, records) == {"g": {T0: OffsetRecord(offset=3, leader_epoch=3)}}


@given(
    st.lists(
        st.one_of(
            st.tuples(
                st.sampled_from(["g", "h"]),
                st.sampled_from([T0, T1]),
                st.none() | st.integers(0, 99),
            ),
            st.tuples(st.sampled_from(["g", "h", "k"]), st.none() | st.integers(1, 9)),
        ),
        max_size=40,
    ),
    st.integers(0, 40),
)
def test_a_snapshot_replays_to_the_state_it_was_taken_of(
    ops: list[tuple[str, TopicPartition, int | None] | tuple[str, int | None]], split: int
) -> None:
    """Replaying the snapshot of a log's state, alone or followed by the rest of the log,
    gives what replaying the whole log gives: compaction never changes a load's outcome."""
    records: list[tuple[bytes, bytes | None]] = []
    for op in ops:
        if len(op) == 3:
            records.append(commit(op[0], op[1], op[2]))
        else:
            group_id, epoch = op
            group = None if epoch is None else Group(group_id=group_id, group_epoch=epoch)
            records.append(encode_group(group_id, group))
    head, tail = records[:split], records[split:]
    taken = snapshot(replay({}, head), replay_groups({}, head))
    assert all(value is not None for _, value in taken)
    assert replay({}, taken) == replay({}, head)
    assert replay_groups({}, taken) == replay_groups({}, head)
    assert replay({}, [*taken, *tail]) == replay({}, records)
    assert replay_groups({}, [*taken, *tail]) == replay_groups({}, records)


COMPACTIONS = [
    ("below the minimum", 99, 1, 100, False),
    ("at the minimum, few live keys", 100, 1, 100, True),
    ("mostly live keys: nothing to gain", 150, 80, 100, False),
    ("more than twice the live keys", 161, 80, 100, True),
    ("exactly twice the live keys", 160, 80, 100, False),
]


@pytest.mark.parametrize(
    ("records_in_log", "live_keys", "min_records", "due"),
    [pytest.param(*r[1:], id=r[0]) for r in COMPACTIONS],
)
def test_compaction_due(records_in_log: int, live_keys: int, min_records: int, due: bool) -> None:
    assert (
        compaction_due(records_in_log=records_in_log, live_keys=live_keys, min_records=min_records)
        is due
    )


LEASES = [
    ("one follower fetched just now", [1000, 0], 2, True),
    ("one follower fetched at the edge of the lease", [500, 0], 2, True),
    ("no follower within the lease", [499, 0], 2, False),
    ("min ISR 3 needs both followers", [1000, 400], 3, False),
    ("min ISR 3, both recent", [1000, 900], 3, True),
    ("min ISR 1: the leader alone", [], 1, True),
]


@pytest.mark.parametrize(
    ("fetches", "min_isr", "holds"), [pytest.param(*r[1:], id=r[0]) for r in LEASES]
)
def test_coordinator_lease(fetches: list[int], min_isr: int, holds: bool) -> None:
    assert (
        coordinator_lease_holds(
            follower_fetch_ms=fetches, min_insync_replicas=min_isr, now_ms=1000, lease_ms=500
        )
        is holds
    )
