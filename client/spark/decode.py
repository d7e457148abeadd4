"""Decode fetched record batches into column lists for one offset range (pure).

A consumer fetch returns whole batches starting at the batch that contains the fetch
offset, so the first batch may hold records below the wanted offset and the last one
records at or past the range end; `decode_range` keeps exactly `[start, end)`.
"""

from __future__ import annotations

import msgspec

from minikafka.record_batch import TimestampType, decode_records, iter_batches

Headers = list[tuple[str, bytes]] | None


class Columns(msgspec.Struct, kw_only=True):
    """Records of one partition as parallel column lists (the Spark row schema's order)."""

    keys: list[bytes | None] = msgspec.field(default_factory=list)
    values: list[bytes | None] = msgspec.field(default_factory=list)
    offsets: list[int] = msgspec.field(default_factory=list)
    timestamps_ms: list[int] = msgspec.field(default_factory=list)
    timestamp_types: list[int] = msgspec.field(default_factory=list)
    headers: list[Headers] = msgspec.field(default_factory=list)

    def __len__(self) -> int:
        return len(self.offsets)


def decode_range(records: bytes, *, start: int, end: int) -> tuple[Columns, int | None]:
    """Records of `records` (concatenated batches) with offsets in `[start, end)`.

    Returns the columns and the offset to fetch next: the end of the last batch seen,
    or None when `records` holds no batch. Record `i` of a batch has offset
    `base_offset + i`; its timestamp is `first_timestamp_ms + delta` for CreateTime and
    the batch's `max_timestamp_ms` for LogAppendTime.
    """
    out = Columns()
    next_offset: int | None = None
    view = memoryview(records)
    for pos, header in iter_batches(view):
        next_offset = header.next_offset
        if header.next_offset <= start:
            continue
        if header.base_offset >= end:
            break
        _, rows = decode_records(view[pos : pos + header.size])
        append_time = header.timestamp_type is TimestampType.LOG_APPEND_TIME
        ts_type = int(header.timestamp_type)
        for index, (delta, key, value, headers) in enumerate(rows):
            offset = header.base_offset + index
            if offset < start:
                continue
            if offset >= end:
                break
            out.keys.append(key)
            out.values.append(value)
            out.offsets.append(offset)
            out.timestamps_ms.append(
                header.max_timestamp_ms if append_time else header.first_timestamp_ms + delta
            )
            out.timestamp_types.append(ts_type)
            out.headers.append(headers or None)
    return out, next_offset
