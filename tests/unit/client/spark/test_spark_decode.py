"""Record decoding and the Arrow schema of the Spark source (pure, no JVM)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from client.spark.decode import decode_range
from minikafka.record_batch import TimestampType, build_batch, stamp

pa = pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")


def batches(counts: list[int], *, first_ts_ms: int = 1_000) -> bytes:
    """Concatenated batches with consecutive offsets; record i has value b"v<i>"."""
    out = []
    offset = 0
    for count in counts:
        records = [
            (first_ts_ms + offset + i, b"k" if i % 2 else None, b"v%d" % (offset + i), None)
            for i in range(count)
        ]
        out.append(stamp(build_batch(records), base_offset=offset, leader_epoch=0))
        offset += count
    return b"".join(out)


@pytest.mark.parametrize(
    ("start", "end", "offsets", "next_offset"),
    [
        (0, 100, list(range(9)), 9),
        (2, 6, [2, 3, 4, 5], 7),
        (4, 5, [4], 7),
        (8, 100, [8], 9),
    ],
    ids=["all", "clip-both-ends", "inside-one-batch", "last-record"],
)
def test_decode_range_keeps_exactly_the_range(
    start: int, end: int, offsets: list[int], next_offset: int
) -> None:
    columns, nxt = decode_range(batches([3, 4, 2]), start=start, end=end)
    assert columns.offsets == offsets
    assert columns.values == [b"v%d" % o for o in offsets]
    assert columns.timestamps_ms == [1_000 + o for o in offsets]
    assert columns.timestamp_types == [0] * len(offsets)
    assert nxt is not None
    assert nxt >= next_offset


@given(st.lists(st.integers(1, 5), min_size=1, max_size=5), st.data())
def test_decode_range_property(counts: list[int], data: st.DataObject) -> None:
    total = sum(counts)
    start = data.draw(st.integers(0, total - 1))
    end = data.draw(st.integers(start + 1, total + 3))
    columns, _ = decode_range(batches(counts), start=start, end=end)
    assert columns.offsets == list(range(start, min(end, total)))


def test_log_append_time_uses_the_brokers_timestamp() -> None:
    batch = build_batch([(5, None, b"a", [("h", b"1")]), (9, None, b"b", None)])
    stamped = stamp(batch, base_offset=10, leader_epoch=1, log_append_time_ms=77)
    columns, nxt = decode_range(stamped, start=10, end=12)
    assert columns.timestamps_ms == [77, 77]
    assert columns.timestamp_types == [int(TimestampType.LOG_APPEND_TIME)] * 2
    assert columns.headers == [[("h", b"1")], None]
    assert nxt == 12


def test_empty_fetch_decodes_to_nothing() -> None:
    columns, nxt = decode_range(b"", start=0, end=5)
    assert len(columns) == 0
    assert nxt is None


@pytest.mark.parametrize("include_headers", [False, True], ids=["plain", "headers"])
def test_arrow_schema_is_exactly_what_spark_expects(include_headers: bool) -> None:
    from pyspark.sql.pandas.types import to_arrow_schema

    from client.spark.schema import arrow_schema, spark_schema

    expected = to_arrow_schema(spark_schema(include_headers), timezone="UTC")
    assert arrow_schema(include_headers).equals(expected)


def test_record_batch_values_and_null_headers() -> None:
    from client.spark.schema import arrow_schema, to_record_batch

    batch = build_batch([(1_500, b"k", b"a", [("h", b"x")]), (1_501, None, b"b", None)])
    columns, _ = decode_range(stamp(batch, base_offset=0, leader_epoch=0), start=0, end=2)
    record_batch = to_record_batch(columns, topic="t", partition=3, include_headers=True)
    assert record_batch.schema.equals(arrow_schema(True))
    rows = record_batch.to_pylist()
    assert [r["key"] for r in rows] == [b"k", None]
    assert [r["partition"] for r in rows] == [3, 3]
    assert rows[0]["timestamp"].timestamp() == 1.5
    assert rows[0]["headers"] == [{"key": "h", "value": b"x"}]
    assert rows[1]["headers"] is None
