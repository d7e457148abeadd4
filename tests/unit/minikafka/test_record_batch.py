"""Record batch format: round trips, restamping, and detection of every bit flip and truncation."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minikafka.record_batch import (
    HEADER_SIZE,
    Compression,
    CorruptBatchError,
    RecordInput,
    TimestampType,
    build_batch,
    decode_records,
    decode_rows,
    iter_batches,
    parse_header,
    stamp,
    stamp_prefix,
)

headers_st = st.one_of(
    st.none(), st.lists(st.tuples(st.text(max_size=8), st.binary(max_size=16)), max_size=3)
)
record_st = st.tuples(
    st.integers(min_value=0, max_value=2**40),
    st.one_of(st.none(), st.binary(max_size=32)),
    st.one_of(st.none(), st.binary(max_size=200)),
    headers_st,
)
records_st = st.lists(record_st, min_size=1, max_size=20)
codec_st = st.sampled_from(list(Compression))


def _expected(
    records: list[RecordInput],
) -> list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes]] | None]]:
    first = records[0][0]
    return [(ts - first, k, v, list(h) if h else None) for ts, k, v, h in records]


@given(
    records=records_st, codec=codec_st, base=st.integers(0, 2**62), epoch=st.integers(0, 2**31 - 1)
)
@settings(max_examples=150, deadline=None)
def test_round_trip_and_restamp(
    records: list[RecordInput], codec: Compression, base: int, epoch: int
) -> None:
    batch = build_batch(records, compression=codec)
    header, rows = decode_records(batch)
    assert header.record_count == len(records)
    assert header.compression is codec
    assert header.first_timestamp_ms == records[0][0]
    assert header.max_timestamp_ms == max(r[0] for r in records)
    assert rows == _expected(records)
    _, structs = decode_rows(batch)
    assert [(r.timestamp_delta_ms, r.key, r.value, r.headers) for r in structs] == rows
    stamped = stamp(batch, base_offset=base, leader_epoch=epoch)
    restamped_header, restamped_rows = decode_records(stamped)
    assert (restamped_header.base_offset, restamped_header.leader_epoch) == (base, epoch)
    assert restamped_header.crc == header.crc  # the main CRC is untouched by restamping
    assert restamped_header.last_offset == base + len(records) - 1
    assert restamped_rows == rows
    assert stamp_prefix(batch, base_offset=base, leader_epoch=epoch) + batch[21:] == stamped


def test_log_append_time_restamp_recomputes_crc() -> None:
    batch = build_batch([(1_000, b"k", b"v", None), (1_010, None, b"w", None)])
    stamped = stamp(batch, base_offset=7, leader_epoch=2, log_append_time_ms=5_000)
    header, rows = decode_records(stamped)
    assert header.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert header.max_timestamp_ms == 5_000
    assert [r[2] for r in rows] == [b"v", b"w"]


@given(records=records_st, codec=codec_st)
@settings(max_examples=20, deadline=None)
def test_every_single_bit_flip_is_detected(records: list[RecordInput], codec: Compression) -> None:
    batch = build_batch(records, compression=codec)
    for bit in range(len(batch) * 8):
        damaged = bytearray(batch)
        damaged[bit // 8] ^= 1 << (bit % 8)
        with pytest.raises(CorruptBatchError):
            decode_records(bytes(damaged))


@given(records=records_st)
@settings(max_examples=20, deadline=None)
def test_every_truncation_is_detected(records: list[RecordInput]) -> None:
    batch = build_batch(records)
    for cut in range(len(batch)):
        with pytest.raises(CorruptBatchError):
            parse_header(batch[:cut])
        with pytest.raises(CorruptBatchError):
            list(iter_batches(batch + batch[:cut])) if cut else parse_header(batch[:cut])


def test_iter_batches_walks_a_concatenation() -> None:
    first = stamp(build_batch([(1, None, b"a", None)]), base_offset=0, leader_epoch=0)
    second = stamp(build_batch([(2, None, b"b", None)] * 3), base_offset=1, leader_epoch=0)
    found = [(pos, h.base_offset, h.record_count) for pos, h in iter_batches(first + second)]
    assert found == [(0, 0, 1), (len(first), 1, 3)]


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        pytest.param(lambda b: b[:10], "truncated batch", id="shorter-than-header"),
        pytest.param(lambda b: _set_i32(b, 61, 0, recrc=True), "has 0 records", id="zero-records"),
        pytest.param(
            lambda b: _set_i32(b, 27, 5, recrc=True), "last offset delta", id="delta-mismatch"
        ),
        pytest.param(lambda b: _set_attr(b, 2), "compression codec", id="snappy-unsupported"),
    ],
)
def test_specific_errors(mutate: object, message: str) -> None:
    batch = build_batch([(1, b"k", b"v", None)])
    assert callable(mutate)
    with pytest.raises(CorruptBatchError, match=message):
        decode_records(mutate(batch))


def test_empty_record_list_refused() -> None:
    with pytest.raises(ValueError, match="at least one record"):
        build_batch([])


def test_compression_parse() -> None:
    assert Compression.parse("LZ4") is Compression.LZ4
    assert Compression.parse(None) is Compression.NONE
    with pytest.raises(ValueError, match="unknown compression type 'snappy'"):
        Compression.parse("snappy")


def test_header_size_is_fixed() -> None:
    batch = build_batch([(1, None, None, None)])
    assert parse_header(batch).size == len(batch)
    assert len(batch) > HEADER_SIZE


def _recrc(buf: bytearray) -> bytes:
    import crc32c

    struct.pack_into("<I", buf, 21, crc32c.crc32c(bytes(buf[25:])))
    return bytes(buf)


def _set_i32(batch: bytes, pos: int, value: int, *, recrc: bool) -> bytes:
    buf = bytearray(batch)
    struct.pack_into("<i", buf, pos, value)
    return _recrc(buf) if recrc else bytes(buf)


def _set_attr(batch: bytes, codec: int) -> bytes:
    buf = bytearray(batch)
    struct.pack_into("<h", buf, 25, codec)
    return _recrc(buf)
