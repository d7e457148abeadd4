"""Content validation of CRC-valid batches that lie (issue 23, findings 3 and 6).

Every row builds a well-formed batch, rewrites what it claims and reseals the CRCs, so
only `content_problem` / `decode_records` can tell.
"""

from __future__ import annotations

import os
import tracemalloc
import zlib

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minikafka.record_batch import (
    LENGTH_PREFIX_SIZE,
    RECORDS_BYTES_MAX,
    Compression,
    CorruptBatchError,
    build_batch,
    content_problem,
    decode_records,
    decode_rows,
    header_fields,
    parse_header,
    scan_batches,
)
from tests.support.lying_batches import gzip_bomb, one_record_batch, patch_header, with_body

TS = 1_700_000_000_000


def _idempotent(**fields: int) -> bytes:
    batch = build_batch([(TS, None, b"v", None)], producer_id=7, producer_epoch=0, base_sequence=0)
    return patch_header(batch, **fields) if fields else batch


@pytest.mark.parametrize(
    ("batch", "problem"),
    [
        pytest.param(one_record_batch(), None, id="plain-batch-is-fine"),
        pytest.param(_idempotent(), None, id="idempotent-batch-is-fine"),
        pytest.param(
            patch_header(one_record_batch(), record_count=1000),
            "record count 1000",
            id="count-1000",
        ),
        pytest.param(
            patch_header(one_record_batch(), record_count=2**31 - 1),
            "record count 2147483647",
            id="count-int32-max",
        ),
        pytest.param(
            patch_header(one_record_batch(), producer_id=-5), "producer id -5", id="producer-id-neg"
        ),
        pytest.param(_idempotent(producer_epoch=-3), "producer epoch -3", id="epoch-negative"),
        pytest.param(_idempotent(base_sequence=-2), "base sequence -2", id="sequence-negative"),
        pytest.param(
            patch_header(one_record_batch(), producer_epoch=-9), "below -1", id="no-pid-epoch-below"
        ),
        pytest.param(
            patch_header(one_record_batch(), first_timestamp_ms=-(2**63)),
            "first timestamp",
            id="timestamp-min-int64",
        ),
        pytest.param(
            patch_header(one_record_batch(), max_timestamp_ms=-2),
            "max timestamp -2",
            id="max-timestamp-below-none",
        ),
        pytest.param(
            patch_header(
                build_batch([(TS, None, b"v", None)], compression=Compression.ZSTD),
                record_count=RECORDS_BYTES_MAX,
            ),
            "cannot fit",
            id="compressed-count-beyond-limit",
        ),
    ],
)
def test_content_problem(batch: bytes, problem: str | None) -> None:
    found = content_problem(parse_header(batch))
    if problem is None:
        assert found is None
    else:
        assert found is not None
        assert problem in found, found
        with pytest.raises(CorruptBatchError, match=problem):
            decode_records(batch)


def _records(count: int) -> bytes:
    return msgspec.msgpack.encode([[0, None, b"v", None]] * count)


@pytest.mark.parametrize(
    ("batch", "message"),
    [
        pytest.param(
            with_body(one_record_batch(), _records(2)), "says 1 records but holds 2", id="more"
        ),
        pytest.param(
            patch_header(with_body(one_record_batch(), _records(3)), record_count=4),
            "says 4 records but holds 3",
            id="fewer",
        ),
        pytest.param(with_body(one_record_batch(), os.urandom(64)), "record", id="random-body"),
        pytest.param(
            with_body(one_record_batch(), _records(1) + b"\x00"),
            "not a valid record list",
            id="trailing-bytes",
        ),
        pytest.param(
            with_body(one_record_batch(), msgspec.msgpack.encode([[0, 1, 2, 3, 4]])),
            "not a valid record list",
            id="record-of-wrong-shape",
        ),
        pytest.param(
            with_body(
                build_batch([(TS, None, b"v", None)], compression=Compression.GZIP),
                zlib.compress(b"x" * 100)[:-3],
            ),
            "cannot decompress GZIP",
            id="gzip-garbage",
        ),
    ],
)
def test_decoding_refuses_a_body_that_does_not_match_the_header(batch: bytes, message: str) -> None:
    for decode in (decode_records, decode_rows):
        with pytest.raises(CorruptBatchError, match=message):
            decode(batch)


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.LZ4, Compression.ZSTD])
def test_decompression_stops_at_the_bound(codec: Compression) -> None:
    rows = [(TS, None, bytes(300_000), None)]
    batch = build_batch(rows, compression=codec)
    assert decode_records(batch)[1][0][2] == bytes(300_000)
    with pytest.raises(CorruptBatchError, match="expand beyond 100000 bytes"):
        decode_records(batch, max_records_bytes=100_000)


def test_a_gzip_bomb_fails_without_expanding_it() -> None:
    """102 KB of gzip expanding to 100 MiB (the finding): refused once the 64 MiB limit is
    passed, and with a consumer's own bound, after about that many bytes."""
    bomb = gzip_bomb(100 * 1024 * 1024)
    assert len(bomb) < 110_000
    tracemalloc.start()
    try:
        with pytest.raises(CorruptBatchError, match="expand beyond"):
            decode_records(bomb, max_records_bytes=8 * 1024 * 1024)
        _, peak_bytes = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak_bytes < 32 * 1024 * 1024, peak_bytes
    with pytest.raises(CorruptBatchError, match=f"expand beyond {RECORDS_BYTES_MAX} bytes"):
        decode_records(bomb)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(1, 300), min_size=1, max_size=4),
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=3),
    st.integers(0, 64),
    st.booleans(),
)
def test_scan_batches_agrees_with_header_fields(
    sizes: list[int], flips: list[tuple[int, int]], cut: int, verify_crc: bool
) -> None:
    """The hot loop of `scan_batches` is only a shortcut: on any record set (valid, with
    flipped bytes, cut short) it returns what walking `header_fields` returns, or raises
    the same error."""
    data = bytearray(b"".join(build_batch([(1_000, None, b"v" * size, None)]) for size in sizes))
    for where, value in flips:
        data[where % len(data)] = value
    del data[len(data) - min(cut, len(data) - 1) :]

    def walk() -> list[tuple[int, tuple[int, ...]]]:
        found: list[tuple[int, tuple[int, ...]]] = []
        pos = 0
        while pos < len(data):
            fields = header_fields(data, pos, verify_crc=verify_crc)
            found.append((pos, fields))
            pos += fields[1] + LENGTH_PREFIX_SIZE
        return found

    try:
        expected: object = walk()
    except CorruptBatchError as exc:
        expected = str(exc)
    try:
        got: object = scan_batches(data, verify_crc=verify_crc)
    except CorruptBatchError as exc:
        got = str(exc)
    assert got == expected
