"""Pure offset planning of the Spark source (client/spark/offsets.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from client.spark.errors import SourceOptionError
from client.spark.offsets import (
    EPOCHS_KEY,
    TP,
    OffsetRange,
    OffsetSpec,
    canonical,
    delay_batch,
    epochs_of,
    flatten,
    nest,
    parse_duration_ms,
    parse_offset_spec,
    parse_timestamp,
    parse_timestamps_by_partition,
    plan_ranges,
    rate_limit,
    resolve_spec,
    resolve_timestamps,
    split_ranges,
    timestamps_to_look_up,
    to_json,
)

tps = st.tuples(st.sampled_from(["a", "b", "orders"]), st.integers(0, 12))
offset_maps = st.dictionaries(tps, st.integers(0, 10_000), max_size=8)


def test_canonical_json_sorts_topics_and_partitions_numerically() -> None:
    messy = {"t": {"10": 1, "2": 5, "1": 0}, "a": {"0": 3}}
    assert json.dumps(canonical(messy)) == '{"a": {"0": 3}, "t": {"1": 0, "2": 5, "10": 1}}'


@given(offset_maps)
def test_canonical_json_is_stable_whatever_the_insertion_order(offsets: dict[TP, int]) -> None:
    backwards = dict(reversed(list(offsets.items())))
    assert to_json(offsets) == to_json(backwards)
    assert flatten(json.loads(to_json(offsets))) == offsets
    assert nest(flatten(nest(offsets))) == nest(offsets)


@pytest.mark.parametrize(
    ("bad", "match"),
    [
        ({"t": {"x": 1}}, "partition id"),
        ({"t": {"0": "y"}}, "offset of t-0"),
        ({"t": {"0": True}}, "offset of t-0"),
        ({"t": [1]}, "must be an object"),
    ],
    ids=["non-int-partition", "non-int-offset", "bool-offset", "list-not-object"],
)
def test_flatten_rejects_malformed_offsets(bad: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        flatten(bad)


@pytest.mark.parametrize(
    ("text", "ending", "streaming", "expected"),
    [
        ("earliest", False, True, OffsetSpec(kind="earliest")),
        (" LATEST ", False, True, OffsetSpec(kind="latest")),
        ("latest", True, False, OffsetSpec(kind="latest")),
        (
            '{"t": {"0": 23, "1": -2}}',
            False,
            True,
            OffsetSpec(kind="specific", offsets={("t", 0): 23, ("t", 1): -2}),
        ),
        ('{"t": {"0": -1}}', True, False, OffsetSpec(kind="specific", offsets={("t", 0): -1})),
    ],
    ids=["earliest", "latest-any-case", "ending-latest", "json-start", "json-end-latest"],
)  # fmt: skip
def test_parse_offset_spec(text: str, ending: bool, streaming: bool, expected: OffsetSpec) -> None:
    assert parse_offset_spec(text, option="o", ending=ending, streaming=streaming) == expected


@pytest.mark.parametrize(
    ("text", "ending", "streaming", "match"),
    [
        ("earliest", True, False, "cannot end there"),
        ("latest", False, False, "not allowed for batch"),
        ("{not json", False, True, "cannot parse"),
        ("{}", False, True, "non-empty object"),
        ('{"t": {"0": -3}}', False, True, "is invalid"),
        ('{"t": {"-1": 0}}', False, True, "negative"),
        ('{"t": {"0": -2}}', True, False, "not allowed as an ending"),
        ('{"t": {"0": -1}}', False, False, "not allowed as a starting offset of a batch"),
    ],
    ids=[
        "end-earliest",
        "batch-start-latest",
        "bad-json",
        "empty-json",
        "offset-below-minus-two",
        "negative-partition",
        "end-minus-two",
        "batch-start-minus-one",
    ],
)
def test_parse_offset_spec_errors(text: str, ending: bool, streaming: bool, match: str) -> None:
    with pytest.raises(SourceOptionError, match=match):
        parse_offset_spec(text, option="o", ending=ending, streaming=streaming)


def test_resolve_spec_substitutes_earliest_and_latest() -> None:
    spec = OffsetSpec(kind="specific", offsets={("t", 0): -2, ("t", 1): -1, ("t", 2): 7})
    got = resolve_spec(
        spec,
        [("t", 0), ("t", 1), ("t", 2)],
        earliest={("t", 0): 3, ("t", 1): 0, ("t", 2): 0},
        latest={("t", 0): 9, ("t", 1): 11, ("t", 2): 12},
        option="startingOffsets",
    )
    assert got == {("t", 0): 3, ("t", 1): 11, ("t", 2): 7}


def test_resolve_spec_requires_exactly_the_partitions_read() -> None:
    spec = OffsetSpec(kind="specific", offsets={("t", 0): 1, ("u", 0): 1})
    with pytest.raises(SourceOptionError, match=r"missing t-1; not read by this query u-0"):
        resolve_spec(spec, [("t", 0), ("t", 1)], earliest={}, latest={}, option="startingOffsets")


@pytest.mark.parametrize(
    ("start", "latest", "limit", "expected"),
    [
        # Spark's example: 10 and 4 behind, limit 5 -> floor(3.57)=3 and floor(1.43)=1.
        ({("t", 0): 0, ("t", 1): 0}, {("t", 0): 10, ("t", 1): 4}, 5, {("t", 0): 3, ("t", 1): 1}),
        # A small partition is not starved: prorate 0.09 rounds up to 1.
        ({("t", 0): 0, ("t", 1): 0}, {("t", 0): 100, ("t", 1): 1}, 10, {("t", 0): 9, ("t", 1): 1}),
        # Nothing new: latest unchanged.
        ({("t", 0): 5}, {("t", 0): 5}, 3, {("t", 0): 5}),
        # Under the limit: everything.
        ({("t", 0): 2}, {("t", 0): 4}, 100, {("t", 0): 4}),
        # A new partition (missing from start) counts from 0.
        ({}, {("t", 0): 8}, 4, {("t", 0): 4}),
    ],
    ids=["prorate", "no-starvation", "no-data", "under-limit", "new-partition"],
)
def test_rate_limit(
    start: dict[TP, int], latest: dict[TP, int], limit: int, expected: dict[TP, int]
) -> None:
    assert rate_limit(start, latest, limit) == expected


@given(offset_maps, st.data(), st.integers(1, 500))
def test_rate_limit_stays_between_start_and_latest_and_makes_progress(
    start: dict[TP, int], data: st.DataObject, limit: int
) -> None:
    latest = {tp: o + data.draw(st.integers(0, 300)) for tp, o in start.items()}
    got = rate_limit(start, latest, limit)
    assert set(got) == set(latest)
    assert all(start[tp] <= got[tp] <= latest[tp] for tp in latest)
    moved = sum(got[tp] - start[tp] for tp in latest)
    lag = sum(latest[tp] - start[tp] for tp in latest)
    assert moved == lag or (moved >= 1 and moved <= limit + len(latest))


def test_plan_ranges_new_partitions_start_at_earliest_and_backwards_is_reported() -> None:
    ranges, backwards = plan_ranges(
        {("t", 0): 5, ("t", 1): 9, ("t", 2): 4},
        {("t", 0): 8, ("t", 1): 6, ("t", 2): 4, ("t", 3): 2},
        earliest={("t", 3): 1},
    )
    assert ranges == [
        OffsetRange(topic="t", partition=0, start=5, end=8),
        OffsetRange(topic="t", partition=3, start=1, end=2),
    ]
    assert backwards == [OffsetRange(topic="t", partition=1, start=9, end=6)]


ranges_strategy = st.lists(
    st.builds(
        lambda p, s, n: OffsetRange(topic="t", partition=p, start=s, end=s + n),
        st.integers(0, 20),
        st.integers(0, 1000),
        st.integers(1, 200),
    ),
    max_size=6,
    unique_by=lambda r: r.partition,
)


@given(ranges_strategy, st.one_of(st.none(), st.integers(1, 40)))
def test_split_ranges_covers_the_same_offsets_exactly_once(
    ranges: list[OffsetRange], min_partitions: int | None
) -> None:
    pieces = split_ranges(ranges, min_partitions)
    covered = sorted((p.partition, o) for p in pieces for o in range(p.start, p.end))
    assert covered == sorted((r.partition, o) for r in ranges for o in range(r.start, r.end))
    assert all(p.size > 0 for p in pieces)
    if min_partitions is None or len(ranges) >= min_partitions:
        assert pieces == ranges
    else:
        assert len(pieces) >= len(ranges)


def test_split_ranges_hits_the_hint_for_one_big_range() -> None:
    pieces = split_ranges([OffsetRange(topic="t", partition=0, start=0, end=10)], 3)
    assert [(p.start, p.end) for p in pieces] == [(0, 4), (4, 7), (7, 10)]


@given(ranges_strategy, st.one_of(st.none(), st.integers(1, 40)), st.integers(1, 50))
def test_max_records_per_partition_bounds_every_piece(
    ranges: list[OffsetRange], min_partitions: int | None, max_records: int
) -> None:
    pieces = split_ranges(ranges, min_partitions, max_records)
    covered = sorted((p.partition, o) for p in pieces for o in range(p.start, p.end))
    assert covered == sorted((r.partition, o) for r in ranges for o in range(r.start, r.end))
    assert all(0 < p.size <= max_records for p in pieces)
    # The fewest pieces that respect the bound, unless minPartitions asks for more.
    fewest = sum(-(-r.size // max_records) for r in ranges)
    if min_partitions is None or fewest >= min_partitions:
        assert len(pieces) == fewest


@pytest.mark.parametrize(
    ("size", "min_partitions", "max_records", "expected"),
    [
        (10, None, 4, [(0, 4), (4, 7), (7, 10)]),
        (10, None, 10, [(0, 10)]),
        (10, None, 100, [(0, 10)]),
        (10, 5, 4, [(0, 2), (2, 4), (4, 6), (6, 7), (7, 9), (9, 10)]),
        (10, 2, 4, [(0, 4), (4, 7), (7, 10)]),
    ],
    ids=["cut-in-3", "exact", "bound-above-size", "min-partitions-wins", "max-records-wins"],
)
def test_max_records_and_min_partitions_together(
    size: int, min_partitions: int | None, max_records: int, expected: list[tuple[int, int]]
) -> None:
    pieces = split_ranges(
        [OffsetRange(topic="t", partition=0, start=0, end=size)], min_partitions, max_records
    )
    assert [(p.start, p.end) for p in pieces] == expected


# ---- timestamps ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (" 1700000000000 ", OffsetSpec(kind="timestamp", timestamp_ms=1_700_000_000_000)),
        ("0", OffsetSpec(kind="timestamp", timestamp_ms=0)),
    ],
)
def test_parse_timestamp(text: str, expected: OffsetSpec) -> None:
    assert parse_timestamp(text, option="startingTimestamp") == expected


@pytest.mark.parametrize("text", ["-5", "soon", "1.5", ""])
def test_parse_timestamp_rejects_non_times(text: str) -> None:
    with pytest.raises(SourceOptionError, match="startingTimestamp must be a time in milli"):
        parse_timestamp(text, option="startingTimestamp")


def test_parse_timestamps_by_partition() -> None:
    got = parse_timestamps_by_partition(
        '{"b": {"1": 20, "0": 10}, "a": {"0": 5}}', option="startingOffsetsByTimestamp"
    )
    assert got == OffsetSpec(kind="timestamp", offsets={("a", 0): 5, ("b", 0): 10, ("b", 1): 20})


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("{", "cannot parse"),
        ("{}", "must be JSON like"),
        ('{"t": {"0": -1}}', "timestamp -1 for t-0 is negative"),
        ('{"t": {"-1": 5}}', "partition -1 of 't' is negative"),
        ('{"t": {"0": "soon"}}', "offset of t-0 must be an integer"),
    ],
)
def test_parse_timestamps_by_partition_errors(text: str, match: str) -> None:
    with pytest.raises(SourceOptionError, match=match):
        parse_timestamps_by_partition(text, option="endingOffsetsByTimestamp")


def test_timestamps_to_look_up_global_and_per_partition() -> None:
    tps = [("t", 1), ("t", 0)]
    assert timestamps_to_look_up(
        OffsetSpec(kind="timestamp", timestamp_ms=7), tps, option="startingTimestamp"
    ) == {("t", 0): 7, ("t", 1): 7}
    per = OffsetSpec(kind="timestamp", offsets={("t", 0): 1, ("t", 1): 2})
    assert timestamps_to_look_up(per, tps, option="x") == {("t", 0): 1, ("t", 1): 2}
    with pytest.raises(SourceOptionError, match=r"a timestamp for every partition.*missing t-1"):
        timestamps_to_look_up(OffsetSpec(kind="timestamp", offsets={("t", 0): 1}), tps, option="x")


@pytest.mark.parametrize(
    ("found", "no_match", "expected"),
    [
        ({("t", 0): 4, ("t", 1): 0}, "error", {("t", 0): 4, ("t", 1): 0}),
        ({("t", 0): 4, ("t", 1): -1}, "latest", {("t", 0): 4, ("t", 1): 90}),
    ],
    ids=["all-found", "none-found-takes-latest"],
)
def test_resolve_timestamps(found: dict[TP, int], no_match: str, expected: dict[TP, int]) -> None:
    times = {("t", 0): 100, ("t", 1): 100}
    latest = {("t", 0): 50, ("t", 1): 90}
    assert (
        resolve_timestamps(found, times=times, latest=latest, no_match=no_match, option="x")
        == expected
    )


def test_resolve_timestamps_error_strategy_names_the_partitions() -> None:
    with pytest.raises(
        SourceOptionError,
        match=r"startingTimestamp: no record at or after the given time in t-1 \(timestamp 100\)",
    ):
        resolve_timestamps(
            {("t", 0): 3, ("t", 1): -1},
            times={("t", 0): 100, ("t", 1): 100},
            latest={},
            no_match="error",
            option="startingTimestamp",
        )


def test_resolve_spec_refuses_a_timestamp_spec() -> None:
    with pytest.raises(ValueError, match="cannot resolve a 'timestamp' spec"):
        resolve_spec(
            OffsetSpec(kind="timestamp", timestamp_ms=1), [], earliest={}, latest={}, option="x"
        )


@pytest.mark.parametrize(
    ("text", "expected_ms"),
    [
        ("15m", 900_000),
        ("30s", 30_000),
        ("500ms", 500),
        ("250", 250),
        (" 2h ", 7_200_000),
        ("1d", 86_400_000),
        ("3min", 180_000),
    ],
)
def test_parse_duration_ms(text: str, expected_ms: int) -> None:
    assert parse_duration_ms(text, option="maxTriggerDelay") == expected_ms


@pytest.mark.parametrize("text", ["", "soon", "-5s", "5 weeks", "1.5s"])
def test_parse_duration_ms_rejects(text: str) -> None:
    with pytest.raises(SourceOptionError, match="maxTriggerDelay must be a duration"):
        parse_duration_ms(text, option="maxTriggerDelay")


@pytest.mark.parametrize(
    ("new_records", "now_ms", "last_trigger_ms", "delayed"),
    [
        (10, 1_000, 900, False),  # enough records
        (3, 1_000, None, False),  # the first trigger always runs (as Spark)
        (3, 1_000, 500, True),  # too few, delay not yet over
        (3, 1_600, 500, False),  # too few, but maxTriggerDelay has passed
        (3, 1_499, 500, True),  # one ms short of the delay
    ],
    ids=["enough", "first", "wait", "delay-over", "just-before"],
)
def test_delay_batch(
    new_records: int, now_ms: float, last_trigger_ms: float | None, delayed: bool
) -> None:
    got = delay_batch(
        new_records=new_records,
        min_records=10,
        now_ms=now_ms,
        last_trigger_ms=last_trigger_ms,
        max_delay_ms=1_000,
    )
    assert got is delayed


def test_leader_epochs_ride_along_and_old_checkpoints_still_load() -> None:
    offsets = {("t", 1): 7, ("t", 0): 30}
    nested = nest(offsets, {("t", 0): 3, ("gone", 0): 1})
    assert json.dumps(nested) == '{"@leaderEpochs": {"t": {"0": 3}}, "t": {"0": 30, "1": 7}}'
    assert list(nest({("0t", 0): 1}, {("0t", 0): 2})) == ["0t", EPOCHS_KEY]
    assert flatten(nested) == offsets
    assert epochs_of(nested) == {("t", 0): 3}
    assert canonical(json.loads(json.dumps(nested))) == nested
    legacy = {"t": {"0": 30, "1": 7}}  # written before epochs were kept
    assert flatten(legacy) == offsets
    assert epochs_of(legacy) == {}
    assert nest(offsets, {}) == nest(offsets) == legacy
    with pytest.raises(ValueError, match="@leaderEpochs must be an object"):
        epochs_of({"t": {"0": 1}, EPOCHS_KEY: 5})
