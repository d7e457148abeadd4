"""Batches whose CRCs are valid but whose contents lie (issue 23, finding 3), for tests.

`patch_header` rewrites header fields of a well-formed batch and `with_body` replaces its
records section; both recompute the two CRCs, so only content validation can tell.
"""

from __future__ import annotations

import gzip
import struct

import crc32c

from minikafka.record_batch import HEADER_SIZE, Compression, build_batch

_FIELDS = {
    # name: (offset, struct format)
    "base_offset": (0, "<q"),
    "leader_epoch": (12, "<i"),
    "attributes": (25, "<h"),
    "last_offset_delta": (27, "<i"),
    "first_timestamp_ms": (31, "<q"),
    "max_timestamp_ms": (39, "<q"),
    "producer_id": (47, "<q"),
    "producer_epoch": (55, "<h"),
    "base_sequence": (57, "<i"),
    "record_count": (61, "<i"),
}


def reseal(batch: bytes | bytearray) -> bytes:
    """`batch` with its batch length, header CRC and main CRC recomputed."""
    data = bytearray(batch)
    struct.pack_into("<i", data, 8, len(data) - 12)
    struct.pack_into("<I", data, 21, crc32c.crc32c(bytes(data[25:])))
    struct.pack_into("<I", data, 17, crc32c.crc32c(bytes(data[:17])))
    return bytes(data)


def patch_header(batch: bytes, **fields: int) -> bytes:
    """Rewrite header fields by name (see `_FIELDS`) and reseal. Setting `record_count`
    alone also sets `last_offset_delta` to match (the framing check stays happy)."""
    data = bytearray(batch)
    if "record_count" in fields and "last_offset_delta" not in fields:
        # int32 on the wire: record_count = -2**31 has no matching delta, keep the lowest.
        fields["last_offset_delta"] = max(-(2**31), fields["record_count"] - 1)
    for name, value in fields.items():
        offset, fmt = _FIELDS[name]
        struct.pack_into(fmt, data, offset, value)
    return reseal(data)


def with_body(batch: bytes, body: bytes) -> bytes:
    """Replace the records section and reseal."""
    return reseal(bytes(batch[:HEADER_SIZE]) + body)


def one_record_batch(value: bytes = b"v", *, timestamp_ms: int = 1_700_000_000_000) -> bytes:
    return build_batch([(timestamp_ms, None, value, None)])


def gzip_bomb(expanded_bytes: int, *, timestamp_ms: int = 1_700_000_000_000) -> bytes:
    """A one-record gzip batch whose records section expands to `expanded_bytes` of zeros
    (a valid gzip stream; the records inside are not a valid record list)."""
    batch = build_batch([(timestamp_ms, None, b"v", None)], compression=Compression.GZIP)
    return with_body(batch, gzip.compress(bytes(expanded_bytes), compresslevel=9))
